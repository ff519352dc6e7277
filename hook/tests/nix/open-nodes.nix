# A derivation that reports which ids it runs as and whether it may open each NVIDIA node it
# sees, for hook/tests/concurrency/'s auto-allocated-id tests: `uid-map <inside> <host>
# <count>`, then `node <path> allowed|denied` (opening a fake node that passes the permission
# check fails with ENXIO, not EACCES). Then it sleeps `sleep` seconds; its command line holds
# `builder-<nonce>`. With `escape`, the builder first takes the id 1000 of its user namespace
# (a `uid-range` build maps 65536) and leaves its chroot as escape.nix does, before sleeping.
# `features`: the required system features, space-separated.
{
  nonce,
  features ? "cuda",
  sleep ? "0",
  escape ? "",
}:
derivation {
  name = "open-nodes";
  inherit nonce;
  system = builtins.currentSystem;
  builder = "/bin/bash";
  PATH = "/bin:/usr/bin:/sbin:/usr/sbin";
  requiredSystemFeatures = builtins.filter (f: builtins.isString f && f != "") (
    builtins.split " " features
  );
  args = [
    "-c"
    ''
      set -u
      {
        echo "uid-map $(tr -s ' ' < /proc/self/uid_map)"
        for d in /dev/nvidia*; do
          [ -c "$d" ] || continue
          if err=$( { exec 3<>"$d"; } 2>&1 ) || [[ "$err" != *"Permission denied"* ]]; then
            echo "node $d allowed"
          else
            echo "node $d denied"
          fi
        done
      } > "$out"
      ${
        if escape == "" then
          ''
            sleep ${sleep}
            : builder-${nonce}
          ''
        else
          ''
            mkdir -p /build/x
            chmod 777 /build /build/x
            exec setpriv --reuid 1000 --regid 1000 --clear-groups unshare -rm sh -c '
              mount -t tmpfs t /build/x
              for d in dev bin lib lib64 usr sbin; do
                [ -e /$d ] || continue
                mkdir -p /build/x/$d && mount --rbind /$d /build/x/$d
              done
              exec chroot /build/x sh -c "sleep ${sleep}; : builder-${nonce}"'
          ''
      }
    ''
  ];
}
