# FAKE NVIDIA drivers as store paths, built (untagged) by runner/tests/driver_choice_e2e/.
# `host` and `compat` are directories assembled by fake_driver (libraries and fake-driver.conf).
# The host driver lands in $out/lib (the target of a NixOS driver link), the compat driver in
# $out/compat (as cuda_compat ships it). Each output references its source store path, so its
# closure holds two paths, as a real driver's does.
{
  host,
  compat ? "",
}:
let
  copy =
    name: subdir: src:
    derivation {
      inherit name subdir;
      system = builtins.currentSystem;
      builder = "/bin/sh";
      PATH = "/bin:/usr/bin";
      src = builtins.path {
        path = /. + src;
        name = "${name}-files";
      };
      args = [
        "-c"
        ''
          mkdir -p $out/$subdir
          cp -R $src/. $out/$subdir/
          echo "FAKE driver for tests, copied from $src" > $out/fake-driver-source
        ''
      ];
    };
in
{
  host = copy "fake-nvidia-driver" "lib" host;
}
// (
  if compat == "" then
    { }
  else
    {
      compat = copy "fake-cuda-compat" "compat" compat;
    }
)
