#!/usr/bin/env bash
# A digest of the contents, as they are on disk (not as git last committed them), of the tracked files
# and the untracked ones git does not ignore: the same on the CPU machine and on the device copy of the
# same working tree. Untracked too, because the device copy's git index can lag the tree it was given
# (2026-12-05: a file added since its HEAD read as untracked there). See device-setup.sh.
# `--files`: the per-file hashes instead (device-setup.sh brings them back as code-files.txt), so a
# digest that differs can be explained with `diff` (2026-12-05: two calls' digests matched no commit).
cd "$(dirname "$0")/.." || exit 1
files() { git ls-files -z --cached --others --exclude-standard | LC_ALL=C sort -z | xargs -0 sha1sum 2>/dev/null; }
if [ "${1:-}" = --files ]; then files; else files | sha1sum | cut -c1-16; fi
