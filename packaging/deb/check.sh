#!/usr/bin/env bash
# packaging/deb/check.sh: builds the package (build.sh) and installs it into
# a scratch root with dpkg -x: the files are where a Debian system expects
# them and the installed binary runs. CI runs this (.ci/run).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deb=$("$repo/packaging/deb/build.sh" | tail -1)
[ -f "$deb" ] || { echo "check.sh: build.sh printed no .deb ($deb)" >&2; exit 1; }
echo "package: $deb"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Section\):/  &/p'
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg -x "$deb" "$root"
control=$(mktemp -d)
dpkg-deb -e "$deb" "$control"
fail() { echo "check.sh: $*" >&2; exit 1; }
for file in usr/bin/tierd lib/systemd/system/tierd.service lib/systemd/system/tierd@.service \
    etc/tierd/tierd.toml usr/share/man/man1/tierd.1.gz usr/share/man/man1/tierd-serve.1.gz \
    usr/share/bash-completion/completions/tierd usr/share/zsh/vendor-completions/_tierd \
    usr/share/fish/vendor_completions.d/tierd.fish usr/share/tierd/grafana/tierd.json \
    usr/share/doc/tierd/copyright; do
  [ -e "$root/$file" ] || fail "the package has no /$file"
done
grep -qx /etc/tierd/tierd.toml "$control/conffiles" || fail "/etc/tierd/tierd.toml is not a conffile"
grep -q "adduser --system" "$control/postinst" || fail "postinst does not create the tierd user"
version=$("$root/usr/bin/tierd" --version)
expected="tierd $(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
[ "$version" = "$expected" ] || fail "installed binary says '$version', expected '$expected'"
zcat "$root/usr/share/man/man1/tierd.1.gz" | grep -q '^\.TH tierd 1' || fail "tierd.1.gz is not a man page"
rm -rf "$control"
echo "ok: $version installs and runs from $(basename "$deb")"
