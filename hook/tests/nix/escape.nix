# A tagged build whose builder leaves its chroot, as a red-team pass demonstrated: in a
# user and mount namespace of its own (`unshare -rm`) it mounts a tmpfs, binds /dev (so it
# keeps the GPU) and the host tools into it, and chroots there; then it sleeps `sleep` seconds.
# Its command line holds `escaped-<nonce>`, so a test can find it.
{
  nonce,
  sleep ? "600",
}:
derivation {
  name = "escape";
  inherit nonce;
  system = builtins.currentSystem;
  builder = "/bin/bash";
  PATH = "/bin:/usr/bin:/sbin:/usr/sbin";
  requiredSystemFeatures = [ "cuda" ];
  args = [
    "-c"
    ''
      mkdir -p /build/x
      exec unshare -rm sh -c '
        mount -t tmpfs t /build/x
        for d in dev bin lib lib64 usr sbin; do
          [ -e /$d ] || continue
          mkdir -p /build/x/$d && mount --rbind /$d /build/x/$d
        done
        exec chroot /build/x sh -c "sleep ${sleep}; : escaped-${nonce}"'
    ''
  ];
}
