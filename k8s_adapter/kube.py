"""The connection to a kube-apiserver: client set-up, error classification and a
resumable list-then-watch (the informer pattern, without a cache library).

Built on ``kubernetes_asyncio`` (the asyncio flavour of the Kubernetes client); it is
imported here only, so ``bridge`` and the other adapters never load it.

Contracts:

* :func:`classify` turns a client error into the bridge's back-end errors: 5xx, 429,
  401/403 (the bridge's credentials or RBAC: an admin fixes them, no job should fail
  for it), connection and timeout errors are :class:`BackendUnavailable` (retry);
  other 4xx refusals (validation, conflict, not found) are :class:`KubeRejected` with
  the apiserver's message and status. A 403 from Pod Security Admission ("violates
  PodSecurity") refuses the job, not the bridge: :class:`KubeRejected`.
* :meth:`Kube.impersonating` is a client that acts as another user
  (``Impersonate-User``), one per user, cached: the apiserver's RBAC and admission
  then judge that user's requests. Its 401/403 name that user, not the bridge.
* :meth:`Kube.list_watch` yields ``("SYNC", items)`` after every (re)list — a complete
  snapshot — then ``(TYPE, object)`` for ``ADDED``/``MODIFIED``/``DELETED``. A watch
  that ends (server timeout) is resumed from the last resourceVersion (bookmarks keep
  it fresh); ``410 Gone`` (history compacted, apiserver restarted) re-lists; an
  unreachable apiserver is retried with capped backoff. It never raises for those.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from bridge.backoff import Backoff
from bridge.plugin_settings import PluginSettings, PositiveFloat, parse_settings

log = structlog.get_logger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
#: Answers and watch events decoded with msgspec's untyped JSON decoder (plain dicts and
#: lists, as the standard library's): pod events are the daemon's biggest input, and
#: ``json.loads`` of them was about 12 % of its CPU while 200 TrainJobs ran
#: (py-spy, bench/k8s_admit.py).
decode_json = msgspec.json.Decoder().decode


def lean_session(rest: Any, host: str | None) -> None:
    """Stop ``rest`` (a kubernetes_asyncio ``RESTClientObject`` for the apiserver at
    ``host``, before its first request) from reading the environment on every request.

    kubernetes_asyncio makes its aiohttp session with ``trust_env=True``, so each
    request looks up the proxy variables and ``~/.netrc`` in a worker thread: 6-7 % of
    the daemon's CPU while 200 TrainJobs ran (py-spy, bench/k8s_admit.py). The
    apiserver's address never changes, so the answer is taken once, here, with
    aiohttp's own lookup (``HTTPS_PROXY``/``NO_PROXY``, proxy credentials from the URL
    or ``~/.netrc``), and kept unless the kubeconfig names a proxy itself. What is
    dropped: ``~/.netrc`` credentials for the apiserver itself (the bridge
    authenticates with its kubeconfig's or service account's credentials)."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    session = rest.pool_manager
    if not session.trust_env:
        return
    if not rest.proxy and host:
        try:
            proxy, auth = get_env_proxy_for_url(URL(host))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}),
                                      "Proxy-Authorization": auth.encode()}
    session._trust_env = False


@dataclass(frozen=True)
class KubeSettings:
    """Where the apiserver is: a kubeconfig (and context), or the in-cluster service
    account when ``kubeconfig`` is ``None`` and the pod has one."""

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: float = 10.0
    #: Server-side timeout of one watch request (it is resumed after).
    watch_timeout: int = 240


class KubeConnection(PluginSettings):
    """The settings every Kubernetes section shares (back end, front door, lease):
    :class:`KubeSettings` as a settings model."""

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: PositiveFloat = 10.0
    watch_timeout: PositiveFloat = 240

    def kube(self) -> KubeSettings:
        """The connection settings :class:`Kube` takes."""
        return KubeSettings(kubeconfig=self.kubeconfig, context=self.context,
                            request_timeout=self.request_timeout,
                            watch_timeout=int(self.watch_timeout))


def kube_settings(section: str, settings: Mapping[str, Any]) -> KubeSettings:
    """:class:`KubeSettings` from a configuration section holding only
    :class:`KubeConnection`'s keys; ValueError names ``section.KEY``."""
    return parse_settings(KubeConnection, section, settings).kube()


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a client ``ApiException`` (None for other errors)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def api_message(exc: BaseException) -> str:
    """The apiserver's ``Status.message`` if the body carries one, else the reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return str(data["message"])
        except (ValueError, TypeError):
            pass
    reason = getattr(exc, "reason", None)
    return str(reason or exc or type(exc).__name__)


#: Watch event types decoded by Kube.list_watch's own decoder.
_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


class KubeRejected(BackendRejected):
    """A 4xx answer; ``status`` is its HTTP status (404, 409 …)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


#: The apiserver's words when Pod Security Admission refuses a pod.
PSA_REFUSAL = "violates PodSecurity"


def classify(exc: BaseException, what: str,
             acting_as: str | None = None) -> BackendUnavailable | KubeRejected:
    """The back-end error for a failed call (``what`` says what was being done;
    ``acting_as`` is the impersonated user, if any)."""
    status = api_status(exc)
    if status is None or status >= 500 or status == 429:
        text = api_message(exc) if status else (str(exc) or type(exc).__name__)
        return BackendUnavailable(f"Kubernetes API: {what}: {text}")
    if status == 403 and PSA_REFUSAL in api_message(exc):
        return KubeRejected(f"Kubernetes API refused to {what} ({status}): "
                            f"{api_message(exc)}", status)
    if status in (401, 403):
        # Credentials or RBAC, not the job: retried (with backoff) until an admin fixes
        # them, so that no job is failed for it.
        if acting_as and "cannot impersonate" not in api_message(exc):
            whose = f"the RBAC of {acting_as}, whom the bridge impersonates for this job"
        else:
            whose = "the bridge's credentials and RBAC: charts/hpc-bridge/files/rbac.yaml"
        return BackendUnavailable(f"Kubernetes API refused to {what} ({status}): "
                                  f"{api_message(exc)} (check {whose})")
    return KubeRejected(f"Kubernetes API refused to {what} ({status}): {api_message(exc)}",
                        status)


def is_status(exc: BaseException, *statuses: int) -> bool:
    """Whether ``exc`` is a :class:`KubeRejected` with one of ``statuses``."""
    return isinstance(exc, KubeRejected) and exc.status in statuses


class Kube:
    """A connected client: ``core`` (CoreV1Api) and ``custom`` (CustomObjectsApi)."""

    def __init__(self, settings: KubeSettings, acting_as: str | None = None):
        self.settings = settings
        #: The impersonated user (None: the bridge's own credentials).
        self.acting_as = acting_as
        self._api: Any = None
        self._cfg: Any = None
        self.core: Any = None
        self.custom: Any = None
        self._impersonated: dict[str, Kube] = {}

    async def connect(self) -> None:
        """Load credentials and check that the apiserver answers (``/version``).
        Raises :class:`BackendUnavailable` with the reason when it cannot."""
        try:
            from kubernetes_asyncio import client, config
        except ImportError as exc:  # pragma: no cover - a packaging error
            raise BackendUnavailable(f"kubernetes_asyncio is not installed: {exc}") from exc
        if self._api is None:
            cfg = client.Configuration()
            try:
                if self.settings.kubeconfig is None:
                    config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
                else:
                    await config.load_kube_config(config_file=self.settings.kubeconfig,
                                                  context=self.settings.context,
                                                  client_configuration=cfg,
                                                  persist_config=False)
            except (config.ConfigException, OSError) as exc:
                raise BackendUnavailable(f"Kubernetes credentials: {exc}") from exc
            self._cfg = cfg
            self._api = client.ApiClient(cfg)
            lean_session(self._api.rest_client, cfg.host)
            self.core = client.CoreV1Api(self._api)
            self.custom = client.CustomObjectsApi(self._api)
            self._version = client.VersionApi(self._api)
        try:
            async with asyncio.timeout(self.settings.request_timeout):
                await self._version.get_code()
        except Exception as exc:
            raise classify(exc, "reach the apiserver") from exc

    @property
    def api_client(self) -> Any:
        """The connected ``ApiClient`` (for APIs beyond ``core`` and ``custom``)."""
        assert self._api is not None, "connect() first"
        return self._api

    def impersonating(self, username: str) -> Kube:
        """A client acting as ``username`` (one per user, kept): same apiserver and
        credentials, every request with ``Impersonate-User``. Connect first."""
        from kubernetes_asyncio import client

        if self._cfg is None:
            raise BackendUnavailable("Kubernetes API: not connected yet")
        kube = self._impersonated.get(username)
        if kube is None:
            kube = Kube(self.settings, acting_as=username)
            kube._cfg = self._cfg
            kube._api = client.ApiClient(self._cfg, header_name="Impersonate-User",
                                         header_value=username)
            lean_session(kube._api.rest_client, self._cfg.host)
            kube.core = client.CoreV1Api(kube._api)
            kube.custom = client.CustomObjectsApi(kube._api)
            self._impersonated[username] = kube
        return kube

    async def close(self) -> None:
        for kube in self._impersonated.values():
            await kube.close()
        self._impersonated.clear()
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def call(self, what: str, fn: Callable[..., Awaitable[Any]], *args: Any,
                   **kwargs: Any) -> Any:
        """``await fn(*args, **kwargs)`` with the request timeout; errors classified."""
        try:
            async with asyncio.timeout(self.settings.request_timeout):
                return await fn(*args, **kwargs)
        except (BackendRejected, BackendUnavailable):
            raise
        except Exception as exc:
            raise classify(exc, what, self.acting_as) from exc

    async def raw(self, what: str, fn: Callable[..., Awaitable[Any]], *args: Any,
                  **kwargs: Any) -> Any:
        """Like :meth:`call` but returns the decoded JSON body (no model classes: lists
        of pods or nodes are decoded many times faster this way). An answer other than
        2xx raises as :meth:`call` does: the client checks the status only when it
        reads the body itself, so without this a 404, 403 or 429 came back as a
        ``Status`` object taken for the answer (an empty listing, for a list)."""
        from kubernetes_asyncio.client.exceptions import ApiException
        from kubernetes_asyncio.client.rest import RESTResponse

        async def go() -> Any:
            resp = await fn(*args, _preload_content=False, **kwargs)
            try:
                data = await resp.read()
            finally:
                resp.release()
            if not 200 <= resp.status <= 299:
                # As the client itself raises it (its stub types http_resp narrower).
                raise ApiException(http_resp=RESTResponse(resp, data))  # type: ignore[arg-type]
            return decode_json(data)
        return await self.call(what, go)

    async def list_watch(self, what: str, list_fn: Callable[..., Awaitable[Any]],
                         *args: Any, **kwargs: Any,
                         ) -> AsyncIterator[tuple[str, Any]]:
        """See the module docstring. ``list_fn`` is a raw-JSON list call (a
        ``list_*`` of the client); ``args``/``kwargs`` select (label selector …)."""
        from kubernetes_asyncio import watch

        class RawWatch(watch.Watch):
            """Events as decoded JSON: no model classes built (a pod event costs a
            fraction as much; the bridge reads plain dicts anyway)."""

            def get_return_type(self, func: object) -> str:
                return ""

            def unmarshal_event(self, data: str | bytes, response_type: str | None) -> Any:
                """The client's own, decoded with :data:`decode_json`: a line that is
                not JSON comes back as it is (list_watch skips it); JSON other than an
                ``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK`` event carrying an
                object with a resourceVersion (an ``ERROR`` event, a malformed one) is
                left to the client's, which raises for it as it documents."""
                try:
                    js = decode_json(data)
                except msgspec.DecodeError:
                    return data
                obj = js.get("object") if isinstance(js, dict) else None
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if not isinstance(js, dict) or js.get("type") not in _EVENTS or not rv:
                    return super().unmarshal_event(data, response_type)
                js["raw_object"] = obj
                self.resource_version = rv
                return js

        backoff = Backoff(0.5, 15.0)
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    listing = await self.raw(f"list {what}", list_fn, *args, **kwargs)
                    rv = str((listing.get("metadata") or {}).get("resourceVersion") or "")
                    backoff.reset()
                    yield "SYNC", list(listing.get("items") or [])
                w = RawWatch()
                async with w:
                    stream = w.stream(list_fn, *args, resource_version=rv,
                                      timeout_seconds=self.settings.watch_timeout,
                                      allow_watch_bookmarks=True, **kwargs)
                    async for event in stream:
                        if not isinstance(event, dict):  # a line that is not JSON
                            log.warning("watch of %s: skipped a line that is not an event",
                                        what)
                            continue
                        kind = event.get("type", "")
                        obj = event.get("raw_object")
                        if w.resource_version:
                            rv = str(w.resource_version)
                        if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
                            yield kind, obj
                        backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                status = exc.status if isinstance(exc, KubeRejected) else api_status(exc)
                if status == 410:
                    log.info("watch of %s expired (410 Gone); listing again", what)
                    rv = None
                    continue
                if isinstance(exc, BackendRejected):
                    log.error("cannot list %s: %s", what, exc)
                else:
                    log.warning("watch of %s failed: %s", what, api_message(exc))
                if status is not None and 400 <= status < 500:
                    rv = None  # e.g. 403 after an RBAC change: start over
                await backoff.sleep()
