{{/* Names and labels. */}}
{{- define "hpc-bridge.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hpc-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hpc-bridge.labels" -}}
{{ include "hpc-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "hpc-bridge.serviceAccountName" -}}
{{- default (include "hpc-bridge.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "hpc-bridge.tokensSecret" -}}
{{- default (printf "%s-api-tokens" (include "hpc-bridge.fullname" .)) .Values.api.existingSecret -}}
{{- end -}}

{{- define "hpc-bridge.jwtSecret" -}}
{{- default (printf "%s-slurm-jwt" (include "hpc-bridge.fullname" .)) .Values.backends.slurm.existingJwtSecret -}}
{{- end -}}

{{- define "hpc-bridge.apiEnabled" -}}
{{- if or .Values.api.tokens .Values.api.existingSecret -}}true{{- end -}}
{{- end -}}

{{/*
The daemon's configuration (bridge/config.py) as a dict, rendered with toToml by
configmap.yaml. Paths are those the Deployment mounts.
*/}}
{{- define "hpc-bridge.config" -}}
{{- $v := .Values -}}
{{- $daemon := dict "state_dir" "/var/lib/hpc-bridge" "socket" "/run/hpc-bridge/bridge.sock"
      "log_format" $v.log.format "log_level" $v.log.level
      "health" (printf "0.0.0.0:%d" (int $v.health.port)) -}}
{{- if include "hpc-bridge.apiEnabled" . -}}
{{- $_ := set $daemon "tcp" (printf "0.0.0.0:%d" (int $v.api.port)) -}}
{{- $_ := set $daemon "token_file" "/etc/hpc-bridge/tokens/tokens.csv" -}}
{{- end -}}
{{- $backends := dict -}}
{{- with $v.backends.kubernetes -}}{{- if .enabled -}}
{{- $k := dict "kind" "kubernetes" "placement" .placement "topology_labels" .topologyLabels -}}
{{- if .defaultImage -}}{{- $_ := set $k "default_image" .defaultImage -}}{{- end -}}
{{- $_ := set $backends "kubernetes" $k -}}
{{- end -}}{{- end -}}
{{- with $v.backends.slurm -}}{{- if .enabled -}}
{{- $s := dict "kind" "slurm" "placement" .placement "rest_url" .restUrl "rest_version" .restVersion
      "jwt_key" "/etc/hpc-bridge/slurm/jwt.key" "rest_user" .restUser -}}
{{- if .defaultPartition -}}{{- $_ := set $s "default_partition" .defaultPartition -}}{{- end -}}
{{- $_ := set $backends "slurm" $s -}}
{{- end -}}{{- end -}}
{{- with $v.backends.flux -}}{{- if .enabled -}}
{{- $f := dict "kind" "flux" "uri" .uri -}}
{{- if .queue -}}{{- $_ := set $f "queue" .queue -}}{{- end -}}
{{- $_ := set $backends "flux" $f -}}
{{- end -}}{{- end -}}
{{- $engine := dict "poll_interval" $v.engine.pollInterval "max_parallel_submits" (int $v.engine.maxParallelSubmits) -}}
{{- $default := $v.engine.defaultBackend | default (ternary $v.frontdoor.backend "" $v.frontdoor.enabled) -}}
{{- if $default -}}{{- $_ := set $engine "default_backend" $default -}}{{- end -}}
{{- $config := dict "daemon" $daemon "engine" $engine "backends" $backends -}}
{{- if $v.frontdoor.enabled -}}
{{- $door := dict "kind" "kubernetes" "backend" $v.frontdoor.backend
      "allowed_backends" $v.frontdoor.allowedBackends "run_as" $v.frontdoor.runAs -}}
{{- if $v.frontdoor.namespaces -}}{{- $_ := set $door "namespaces" $v.frontdoor.namespaces -}}{{- end -}}
{{- if $v.frontdoor.namespaceUsers -}}{{- $_ := set $door "namespace_users" $v.frontdoor.namespaceUsers -}}{{- end -}}
{{- with $v.frontdoor.topologyWebhook -}}{{- if .enabled -}}
{{- $_ := set $door "webhook_listen" (printf "0.0.0.0:%d" (int .port)) -}}
{{- $_ := set $door "webhook_tls_cert" "/etc/hpc-bridge/topology-webhook/tls.crt" -}}
{{- $_ := set $door "webhook_tls_key" "/etc/hpc-bridge/topology-webhook/tls.key" -}}
{{- end -}}{{- end -}}
{{- $_ := set $config "frontdoors" (dict "kubernetes" $door) -}}
{{- end -}}
{{- if $v.leaderElection.enabled -}}
{{- $_ := set $config "leader_election" (dict "kind" "kubernetes" "lease" $v.leaderElection.leaseName
      "namespace" .Release.Namespace "lease_duration" (int $v.leaderElection.leaseDuration)
      "renew_deadline" $v.leaderElection.renewDeadline "retry_period" $v.leaderElection.retryPeriod) -}}
{{- end -}}
{{- with $v.events.mqtt -}}{{- if .enabled -}}
{{- $m := dict "host" .host "port" (int .port)
      "prefix" (.prefix | default (printf "hpc-bridge/%s" (include "hpc-bridge.fullname" $))) -}}
{{- if .username -}}{{- $_ := set $m "username" .username -}}{{- end -}}
{{- if .passwordSecret.name -}}{{- $_ := set $m "password_file" "/etc/hpc-bridge/mqtt/password/password" -}}{{- end -}}
{{- if .tls.enabled -}}
{{- $_ := set $m "tls" true -}}
{{- if .tls.caSecret -}}{{- $_ := set $m "ca_file" "/etc/hpc-bridge/mqtt/ca/ca.crt" -}}{{- end -}}
{{- if .tls.clientCertSecret -}}
{{- $_ := set $m "cert_file" "/etc/hpc-bridge/mqtt/client/tls.crt" -}}
{{- $_ := set $m "key_file" "/etc/hpc-bridge/mqtt/client/tls.key" -}}
{{- end -}}
{{- end -}}
{{- $_ := set $config "events" (dict "mqtt" $m) -}}
{{- end -}}{{- end -}}
{{- if $v.metrics.enabled -}}
{{- $_ := set $config "metrics" (dict "listen" (printf "0.0.0.0:%d" (int $v.metrics.port))) -}}
{{- end -}}
{{- with $v.trainerStatus -}}{{- if .enabled -}}
{{- $url := .url | default (printf "https://%s.%s.svc:%d" (include "hpc-bridge.fullname" $) $.Release.Namespace (int .port)) -}}
{{- $_ := set $config "trainer_status" (dict "listen" (printf "0.0.0.0:%d" (int .port)) "url" $url
      "tls_cert" "/etc/hpc-bridge/trainer-status/tls/tls.crt"
      "tls_key" "/etc/hpc-bridge/trainer-status/tls/tls.key"
      "ca_cert" (ternary "/etc/hpc-bridge/trainer-status/ca/ca.crt" "/etc/hpc-bridge/trainer-status/tls/tls.crt" (ne .caSecret ""))
      "secret_file" "/etc/hpc-bridge/trainer-status/key/key") -}}
{{- end -}}{{- end -}}
{{- toToml $config -}}
{{- end -}}

{{/*
Non-empty when the TrainJob door's topology webhook is on (it needs the door, a TLS
Secret and the CA bundle the apiserver verifies it with).
*/}}
{{- define "hpc-bridge.topologyWebhook" -}}
{{- with .Values.frontdoor -}}{{- if and .enabled .topologyWebhook.enabled -}}
{{- if not .topologyWebhook.tlsSecret -}}{{- fail "frontdoor.topologyWebhook.tlsSecret: the webhook needs a kubernetes.io/tls Secret (the apiserver calls webhooks over TLS only)" -}}{{- end -}}
{{- if not .topologyWebhook.caBundle -}}{{- fail "frontdoor.topologyWebhook.caBundle: the base64 PEM of the CA that signed tlsSecret's certificate (the apiserver verifies the webhook with it)" -}}{{- end -}}
true
{{- end -}}{{- end -}}
{{- end -}}
