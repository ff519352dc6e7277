# For `nix-build --keep-going`: a tagged build that fails at once, an untagged build that needs
# it (so Nix keeps the failed build's goal, and under Nix 2.8 and 2.26 its chroot, until the
# run ends), and an untagged build that sleeps `sleep` seconds with `long-<nonce>` on its
# command line, so that the run goes on.
{ nonce, sleep ? "600" }:
let
  mk = name: attrs: derivation ({
    inherit name nonce;
    system = builtins.currentSystem;
    builder = "/bin/bash";
    PATH = "/bin:/usr/bin";
  } // attrs);
  failing = mk "failing" {
    requiredSystemFeatures = [ "cuda" ];
    args = [ "-c" "exit 1" ];
  };
in
{
  after = mk "after-failing" { dep = failing; args = [ "-c" "echo > $out" ]; };
  long = mk "long" { args = [ "-c" "sleep ${sleep}; echo > $out # long-${nonce}" ]; };
}
