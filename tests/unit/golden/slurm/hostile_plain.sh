#!/bin/bash
# hpc-bridge TrainJob team-a/train uid=00000000-0000-4000-8000-000000000001 runtime=plain
exec sh -c 'it'"'"'s "quoted" $(touch /tmp/pwned) `touch /tmp/pwned` ${HOME} ; rm -rf / # é✓' 'a
b' 'ünïcødé' ''"'"'' ''
