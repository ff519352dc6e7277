# Two tagged builds of one Nix process: escape.nix's builder, which leaves its chroot at once,
# and a second one that starts `delay` seconds later (it needs an untagged build that sleeps
# that long), while the escaped builder still sleeps `sleep` seconds.
{
  nonce,
  delay ? "8",
  sleep ? "30",
}:
let
  mk = import ./bash-derivation.nix { inherit nonce; };
  wait = mk "delay" {
    args = [
      "-c"
      "sleep ${delay}; echo > $out"
    ];
  };
in
{
  escape = import ./escape.nix { inherit nonce sleep; };
  second = mk "second" {
    requiredSystemFeatures = [ "cuda" ];
    after = wait;
    args = [
      "-c"
      "echo > $out"
    ];
  };
}
