#!/usr/bin/env bash
# A digest of the tracked files' contents as they are on disk (not as git last committed them):
# the same on the CPU machine and on the device copy of the same working tree. See device-setup.sh.
cd "$(dirname "$0")/.." && git ls-files -z | xargs -0 sha1sum 2>/dev/null | sha1sum | cut -c1-16
