# For `nix-build --keep-going`: a tagged build that fails after a second, a build that needs
# it, and an untagged build that sleeps `sleep` seconds with `long-<nonce>` on its command
# line, so that the run goes on. Nix 2.8 keeps the failed build's chroot while the run goes on
# in this shape (a failed build asked for and needed by another).
{
  nonce,
  sleep ? "600",
}:
let
  mk = import ./bash-derivation.nix { inherit nonce; };
  failing = mk "failing" {
    requiredSystemFeatures = [ "cuda" ];
    args = [
      "-c"
      "sleep 1; exit 1"
    ];
  };
in
{
  inherit failing;
  after = mk "after-failing" {
    inherit failing;
    args = [
      "-c"
      "echo > $out"
    ];
  };
  long = mk "long" {
    args = [
      "-c"
      "sleep ${sleep}; echo > $out # long-${nonce}"
    ];
  };
}
