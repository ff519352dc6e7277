# A tagged build that ends its own lease, as a red-team pass demonstrated: one of its inputs is
# a plain directory whose store name, `x.drv.chroot`, is that of a Nix chroot (`decoy`: a
# directory holding the empty directories bin, dev, lib, lib64, sbin and usr). In a user and
# mount namespace of its own (`unshare -rm`) the builder binds /dev (so it keeps the GPU) and
# the host tools onto those directories, and chroots into the input; then it sleeps `sleep`
# seconds. Its command line holds `escaped-<nonce>`, so a test can find it.
{
  nonce,
  decoy,
  sleep ? "600",
}:
let
  input = builtins.path {
    path = decoy;
    name = "x.drv.chroot";
  };
in
derivation {
  name = "decoy-chroot";
  inherit nonce;
  system = builtins.currentSystem;
  builder = "/bin/bash";
  PATH = "/bin:/usr/bin:/sbin:/usr/sbin";
  requiredSystemFeatures = [ "cuda" ];
  args = [
    "-c"
    ''
      exec unshare -rm sh -c '
        for d in dev bin lib lib64 usr sbin; do
          [ -e /$d ] || continue
          mount --rbind /$d ${input}/$d
        done
        exec chroot ${input} sh -c "sleep ${sleep}; : escaped-${nonce}"'
    ''
  ];
}
