#!/usr/bin/env bash
# Installs Abhed @VERSION@ from this bundle. Verifies first, copies after: the signature over
# SHA256SUMS (with minisign, else openssl 3), then a closed file list and every checksum.
# Needs bash and coreutils only: no python, no network, no root.
#
#   ./install.sh [--prefix DIR] [--pubkey FILE | --key-id ID] [--verify-only]
#   ./install.sh --uninstall [--prefix DIR]
#
# A bundle made with `--policy FILE` carries a site policy (policy/policy.toml): it is placed at the fixed
# path /etc/abhed/policy.toml, root:root 0644, so install.sh must then run as root.
#
# Messages match `abhed bundle verify` (bundle/verify.py): keep the two in step.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi  # run as `sh install.sh`: bash is needed
set -euo pipefail
umask 022

bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
DAMAGED="The bundle is damaged or was changed after it was signed. Do not install it: copy the bundle again \
from the original medium, or ask whoever made it for a new one (README-OFFLINE.md, 'When verification fails')."
# One path component as bundle/sums.py allows it: no leading '-', no backslash, quote or newline.
COMPONENT='[A-Za-z0-9._+@=,~][A-Za-z0-9._+@=,~ -]*'

die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

usage() {
    cat <<EOF
Usage: ./install.sh [--prefix DIR] [--pubkey FILE | --key-id ID] [--verify-only]
       ./install.sh --uninstall [--prefix DIR]

Verifies this Abhed @VERSION@ bundle, then installs PREFIX/bin/abhed and PREFIX/share/abhed/.
  --prefix DIR    where to install (default: /usr/local as root, else ~/.local)
  --pubkey FILE   the site's public key, distributed separately from the bundle
  --key-id ID     trust the bundle's own abhed.pub only if its key ID is ID (got out of band)
  --verify-only   verify, print the result, install nothing
  --uninstall     remove PREFIX/bin/abhed and PREFIX/share/abhed (sessions and settings stay)
Without --pubkey, a key pinned by a previous install (PREFIX/share/abhed/abhed.pub) is trusted.
A bundle carrying a site policy (policy/policy.toml) installs only as root: the policy goes to
/etc/abhed/policy.toml, root:root 0644, where no user can change it.
EOF
}

prefix="" pubkey="" key_id="" verify_only=0 uninstall=0
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory."; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#*=}; shift ;;
        --pubkey) [ $# -ge 2 ] || die "--pubkey needs a file."; pubkey=$2; shift 2 ;;
        --pubkey=*) pubkey=${1#*=}; shift ;;
        --key-id) [ $# -ge 2 ] || die "--key-id needs an ID (16 hex digits)."; key_id=$2; shift 2 ;;
        --key-id=*) key_id=${1#*=}; shift ;;
        --verify-only) verify_only=1; shift ;;
        --uninstall) uninstall=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'." ;;
    esac
done
if [ -z "$prefix" ]; then
    if [ "$(id -u)" = 0 ]; then prefix=/usr/local; else prefix=${HOME:?HOME is not set; pass --prefix DIR}/.local; fi
fi
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
pinned=$prefix/share/abhed/abhed.pub

if [ "$uninstall" = 1 ]; then
    # Only what install.sh put there; the pinned key marks a prefix as ours.
    [ -f "$pinned" ] || die "no Abhed installed by install.sh in $prefix ($pinned is missing). Give the prefix \
it was installed into with --prefix DIR."
    rm -f "$prefix/bin/abhed" && rm -rf "$prefix/share/abhed" \
        || die "cannot remove Abhed from $prefix: run as a user who can write there (root for /usr/local)."
    echo "install.sh: removed $prefix/bin/abhed and $prefix/share/abhed/ (sessions in ~/.local/share/abhed stay)."
    [ ! -e /etc/abhed/policy.toml ] || echo "install.sh: the site policy /etc/abhed/policy.toml stays (the site's \
decision): remove it by hand if it should go."
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/abhed-install.XXXXXX")
staged_bin="" staged_share="" old_share="" staged_policy=""
cleanup() {
    rm -rf "$tmp"
    [ -z "$staged_bin" ] || rm -f "$staged_bin"
    [ -z "$staged_policy" ] || rm -f "$staged_policy"
    [ -z "$staged_share" ] || rm -rf "$staged_share"
    # Interrupted between the two renames: put the previous share/abhed back.
    if [ -n "$old_share" ] && [ -e "$old_share" ] && [ ! -e "$prefix/share/abhed" ]; then
        mv "$old_share" "$prefix/share/abhed"
    fi
}
trap cleanup EXIT

# The key ID as minisign prints it: 8 bytes from offset $2 of file $1, read as a little-endian number.
key_id_of() {
    local hex out="" i
    hex=$(od -An -tx1 -j "$2" -N 8 "$1" | tr -d ' \n')
    for i in 0 2 4 6 8 10 12 14; do out=${hex:$i:2}$out; done
    printf '%s' "${out^^}"
}

# Decode base64 text $1 (line $6 of file $4, a minisign $5) into file $2, which must hold $3 bytes;
# else die, ending the message with $7.
decode() {
    printf '%s' "$1" | base64 -d > "$2" 2>/dev/null || die "$4: not a minisign $5: line $6 is not base64. $7"
    local size
    size=$(wc -c < "$2" | tr -d ' ')
    [ "$size" = "$3" ] || die "$4: not a minisign $5: line $6 holds $size bytes, not $3. $7"
}

# A minisign public key file $1 (or its bare base64 line) -> $tmp/key.bin (2 + 8 + 32 bytes).
# $2 names it in messages, $3 says what it is, $4 is the advice when it is not a key.
read_pubkey() {
    local file=$1 name=$2 label=$3 advice=$4 first line number
    [ -r "$file" ] && [ -f "$file" ] || die "$name: cannot read the $label."
    first=$(head -n 1 "$file" | tr -d '\r')
    case $first in
        "untrusted comment: "*) line=$(sed -n 2p "$file" | tr -d '\r') number=2 ;;
        *) line=$first number=1 ;;
    esac
    decode "$line" "$tmp/key.bin" 42 "$name" "public key" "$number" "$advice"
    [ "$(head -c 2 "$tmp/key.bin")" = Ed ] || die "$name: not a minisign public key: algorithm is not Ed25519. $advice"
}
KEY_ADVICE="Give the site's public key file as written by bundle.keygen or minisign -G."

# Which key to trust, and why (same rules as bundle/verify.py: a bundle never vouches for itself).
want=""
if [ -n "$key_id" ]; then
    want=${key_id// /}
    [[ $want =~ ^[0-9A-Fa-f]{16}$ ]] || die "--key-id: key ID '$key_id' is not 16 hexadecimal digits."
    want=${want^^}
fi
if [ -n "$pubkey" ]; then
    read_pubkey "$pubkey" "$pubkey" "public key given with --pubkey" "$KEY_ADVICE"
    why="--pubkey $pubkey"
elif [ -f "$pinned" ]; then
    read_pubkey "$pinned" "$pinned" "key pinned by a previous install" "$KEY_ADVICE"
    why="pinned by a previous install at $pinned"
else
    [ -f "$bundle/abhed.pub" ] || die "abhed.pub: missing from the bundle $bundle. $DAMAGED"
    read_pubkey "$bundle/abhed.pub" abhed.pub "bundle's public key" "$DAMAGED"
    bundle_id=$(key_id_of "$tmp/key.bin" 2)
    if [ -z "$want" ]; then
        die "no trusted key: the bundle is signed by key ID $bundle_id, but a bundle cannot vouch for itself. \
Either pass the site's public key (distributed separately) with --pubkey FILE, or confirm the ID $bundle_id \
with whoever made the bundle (by phone, on paper) and pass --key-id $bundle_id."
    fi
    [ "$bundle_id" = "$want" ] || die "abhed.pub: the bundle's key has ID $bundle_id, not the ID $want you were \
given. Someone may have replaced the bundle's key. Do not install: check the ID with whoever made the bundle, \
or get the site's public key and pass it with --pubkey FILE."
    why="the bundle's abhed.pub, confirmed with --key-id"
fi
trusted_id=$(key_id_of "$tmp/key.bin" 2)
if [ -n "$want" ] && [ "$want" != "$trusted_id" ]; then
    die "--key-id $want does not match the trusted key $trusted_id ($why). Check the ID you were given."
fi
cp "$tmp/key.bin" "$tmp/trusted.bin"

# The signature file: algorithm "ED" (prehashed), key ID, signature; trusted comment; global signature.
sums=$bundle/SHA256SUMS sig=$bundle/SHA256SUMS.minisig
for f in "$sums" "$sig"; do [ -f "$f" ] || die "${f##*/}: missing from the bundle $bundle. $DAMAGED"; done
lines=$(sed -n '$=' "$sig")  # counts a last line without a newline, as bundle/minisign.py does
[ "${lines:-0}" -ge 4 ] || die "SHA256SUMS.minisig: not a minisign signature: it has fewer \
than 4 lines (is the file truncated?). $DAMAGED"
[[ $(head -n 1 "$sig") == "untrusted comment: "* ]] || die "SHA256SUMS.minisig: not a minisign signature: the \
first line should begin with 'untrusted comment:'. $DAMAGED"
decode "$(sed -n 2p "$sig" | tr -d '\r')" "$tmp/sig.bin" 74 SHA256SUMS.minisig signature 2 "$DAMAGED"
comment=$(sed -n 3p "$sig" | tr -d '\r')
[[ $comment == "trusted comment: "* ]] || die "SHA256SUMS.minisig: not a minisign signature: line 3 should \
begin with 'trusted comment:'. $DAMAGED"
comment=${comment#trusted comment: }
decode "$(sed -n 4p "$sig" | tr -d '\r')" "$tmp/global.bin" 64 SHA256SUMS.minisig signature 4 "$DAMAGED"
sig_id=$(key_id_of "$tmp/sig.bin" 2)
if [ "$sig_id" != "$trusted_id" ]; then
    die "SHA256SUMS: signed by key ID $sig_id, but the trusted key is $trusted_id ($why). If the site changed \
its signing key, pass the new public key with --pubkey FILE; otherwise do not install: the bundle was not made \
by your site."
fi
case $(head -c 2 "$tmp/sig.bin") in
    ED) ;;
    Ed) die "SHA256SUMS.minisig: uses minisign's legacy (non-prehashed) algorithm; Abhed bundles are signed with \
the prehashed one. Re-sign with \`minisign -S\` (0.11 or later) or bundle.make." ;;
    *) die "SHA256SUMS.minisig: not a minisign signature: unknown algorithm. $DAMAGED" ;;
esac
tail -c 64 "$tmp/sig.bin" > "$tmp/sig64.bin"
{ cat "$tmp/sig64.bin"; printf '%s' "$comment"; } > "$tmp/global-message.bin"
BAD_SIG="SHA256SUMS: signature does not verify with key $trusted_id. $DAMAGED"
BAD_COMMENT="SHA256SUMS.minisig: the trusted comment's signature does not verify with key $trusted_id (the \
comment was altered). $DAMAGED"

verify_with_minisign() {
    local out
    # -P takes the key's base64; minisign checks both the file signature and the comment's.
    if out=$(minisign -V -m "$sums" -x "$sig" -P "$(base64 -w 0 < "$tmp/trusted.bin")" 2>&1); then return 0; fi
    case $out in *omment*) die "$BAD_COMMENT" ;; *) die "$BAD_SIG" ;; esac
}

verify_with_openssl() {
    local version
    version=$(openssl version 2>/dev/null || true)
    [[ $version =~ ^OpenSSL\ ([3-9]|[1-9][0-9]) ]] || die "the signature cannot be checked: minisign is not \
installed and '${version:-openssl}' is not OpenSSL 3 or later (needed for Ed25519 with -rawin). Install \
minisign (apt-get install minisign) or OpenSSL 3, then run install.sh again. Nothing was installed."
    # Ed25519 SubjectPublicKeyInfo: a fixed DER prefix, then the 32 key bytes.
    { printf '\x30\x2a\x30\x05\x06\x03\x2b\x65\x70\x03\x21\x00'; tail -c 32 "$tmp/trusted.bin"; } > "$tmp/key.der"
    openssl dgst -blake2b512 -binary "$sums" > "$tmp/digest.bin" || die "openssl cannot compute BLAKE2b-512 of SHA256SUMS."
    openssl pkeyutl -verify -pubin -inkey "$tmp/key.der" -keyform DER -rawin -in "$tmp/digest.bin" \
        -sigfile "$tmp/sig64.bin" > /dev/null 2>&1 || die "$BAD_SIG"
    openssl pkeyutl -verify -pubin -inkey "$tmp/key.der" -keyform DER -rawin -in "$tmp/global-message.bin" \
        -sigfile "$tmp/global.bin" > /dev/null 2>&1 || die "$BAD_COMMENT"
}

if command -v minisign > /dev/null 2>&1; then
    verify_with_minisign; tool=minisign
elif command -v openssl > /dev/null 2>&1; then
    verify_with_openssl; tool=openssl
else
    die "the signature cannot be checked: neither minisign nor openssl is installed, and Abhed is never installed \
unverified. Install minisign (apt-get install minisign) or OpenSSL 3, then run install.sh again. Nothing was installed."
fi
command -v sha256sum > /dev/null 2>&1 || die "sha256sum (coreutils) is not installed; it is needed to check the \
files. Nothing was installed."

# The signed list, then the closed file list: every file listed, nothing unlisted, every checksum right.
declare -A digest
order=()
check_name() {  # $1: a relative path; $2: what to say where it came from
    [[ $1 =~ ^$COMPONENT(/$COMPONENT)*$ ]] && [[ /$1/ != */./* && /$1/ != */../* ]] \
        || die "$2'$1': not a plain relative path inside the bundle (no '..', no leading '/' or '-', no backslash \
or newline). $DAMAGED"
}
n=0
while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    [[ $line =~ ^([0-9a-f]{64})\ [\ *](.+)$ ]] || die "SHA256SUMS line $n: not '<sha256 in hex>  <file>'. $DAMAGED"
    name=${BASH_REMATCH[2]} hash=${BASH_REMATCH[1]}
    check_name "$name" ""
    [ -z "${digest[$name]+x}" ] || die "SHA256SUMS line $n: $name is listed twice. $DAMAGED"
    case $name in SHA256SUMS|SHA256SUMS.minisig) die "SHA256SUMS line $n: $name cannot list itself or its \
signature. $DAMAGED" ;; esac
    digest[$name]=$hash
    order+=("$name")
done < "$sums"

odd=$(cd "$bundle" && find . -mindepth 1 ! -type d ! -type f -print -quit)
[ -z "$odd" ] || die "${odd#./}: not a regular file (a symlink or a device); a bundle holds only plain files. $DAMAGED"
while IFS= read -r -d '' path; do
    rel=${path#./}
    case $rel in SHA256SUMS|SHA256SUMS.minisig) continue ;; esac
    check_name "$rel" ""
    [ -n "${digest[$rel]+x}" ] || die "$rel: in the bundle but not listed in SHA256SUMS. $DAMAGED"
done < <(cd "$bundle" && find . -type f -print0 | LC_ALL=C sort -z)

sha256_of() { local out; out=$(sha256sum < "$1") && printf '%s' "${out:0:64}"; }
for rel in "${order[@]}"; do
    [ -f "$bundle/$rel" ] || die "$rel: listed in SHA256SUMS but missing from the bundle. $DAMAGED"
    [ "$(sha256_of "$bundle/$rel")" = "${digest[$rel]}" ] || die "$rel: checksum mismatch. $DAMAGED"
done
echo "install.sh: verified ${#order[@]} files, signed by key ID $trusted_id ($why; checked with $tool); \
trusted comment: $comment"
[ "$verify_only" = 0 ] || exit 0

# Install: stage beside the destination, re-check the staged copies (the stick could change under us),
# then rename into place, so PREFIX never holds a half-copied file under its final name.
for rel in abhed README-OFFLINE.md; do
    [ -n "${digest[$rel]+x}" ] || die "$rel: not in this bundle's SHA256SUMS, so it cannot be installed. $DAMAGED"
done
POLICY=policy/policy.toml POLICY_DIR=/etc/abhed  # fixed: Abhed reads the site policy from there only
if [ -n "${digest[$POLICY]+x}" ] && [ "$(id -u)" != 0 ]; then
    die "this bundle carries a site policy ($POLICY) for $POLICY_DIR/policy.toml, which must be root's so that no user can change it: run install.sh as root (sudo ./install.sh ...). Nothing was installed."
fi
cannot() { die "cannot write to $1: $2. Choose a prefix you can write (--prefix ~/.local) or run as root."; }
mkdir -p "$prefix/bin" "$prefix/share" 2>/dev/null || cannot "$prefix" "creating bin/ and share/ failed"
staged_share=$prefix/share/.abhed.new.$$
staged_bin=$prefix/bin/.abhed.new.$$
rm -rf "$staged_share"
mkdir "$staged_share" 2>/dev/null || cannot "$prefix/share" "permission denied"
for rel in "${order[@]}"; do
    case $rel in
        offline_models/*|sbom/*|microvm/*|README-OFFLINE.md) target=$staged_share/$rel ;;
        abhed) target=$staged_bin ;;
        *) continue ;;
    esac
    mkdir -p "$(dirname "$target")"
    cp "$bundle/$rel" "$target" 2>/dev/null || cannot "$(dirname "$target")" "copying $rel failed"
    [ "$(sha256_of "$target")" = "${digest[$rel]}" ] || die "$rel: checksum mismatch after copying (the bundle \
changed while installing, or the disk is failing). Nothing was replaced. $DAMAGED"
done
# Pin the key this install trusted (the very bytes it verified with, in minisign's format), so the next
# bundle must be signed by it, or by a key the operator then gives with --pubkey.
{ printf 'untrusted comment: minisign public key %s\n' "$trusted_id"; base64 -w 0 < "$tmp/trusted.bin"; echo; } \
    > "$staged_share/abhed.pub"
chmod 755 "$staged_bin"
# The site policy first: should placing it fail, the previous Abhed stays as it was.
if [ -n "${digest[$POLICY]+x}" ]; then
    staged_policy=$POLICY_DIR/.policy.toml.new.$$
    mkdir -p "$POLICY_DIR" && chown root:root "$POLICY_DIR" && chmod 0755 "$POLICY_DIR" \
        || die "cannot make $POLICY_DIR root's directory (0755). Nothing was replaced."
    cp "$bundle/$POLICY" "$staged_policy" && chown root:root "$staged_policy" && chmod 0644 "$staged_policy" \
        || { rm -f "$staged_policy"; die "cannot write $staged_policy. Nothing was replaced."; }
    [ "$(sha256_of "$staged_policy")" = "${digest[$POLICY]}" ] || { rm -f "$staged_policy"; die "$POLICY: checksum \
mismatch after copying. Nothing was replaced. $DAMAGED"; }
    mv -f "$staged_policy" "$POLICY_DIR/policy.toml"; staged_policy=""
    echo "install.sh: placed the site policy $POLICY_DIR/policy.toml (root:root 0644): every user's Abhed now \
runs under it; \`abhed doctor\` shows what it locks."
fi
if [ -e "$prefix/share/abhed" ]; then
    old_share=$prefix/share/.abhed.old.$$
    mv "$prefix/share/abhed" "$old_share"
fi
mv "$staged_share" "$prefix/share/abhed"; staged_share=""
mv -f "$staged_bin" "$prefix/bin/abhed"; staged_bin=""
[ -z "$old_share" ] || rm -rf "$old_share"

echo "install.sh: installed Abhed @VERSION@: $prefix/bin/abhed, $prefix/share/abhed/ (key $trusted_id pinned)."
case :$PATH: in
    *":$prefix/bin:"*) ;;
    *) echo "install.sh: $prefix/bin is not on your PATH; add it (e.g. export PATH=\"$prefix/bin:\$PATH\" in ~/.profile)." ;;
esac
echo "install.sh: check it with: $prefix/bin/abhed --version && $prefix/bin/abhed doctor"
