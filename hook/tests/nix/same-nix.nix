# Two tagged builds of one Nix process: escape.nix's builder, which leaves its chroot at once
# and sleeps `sleep` seconds, and a second one that starts once the test creates `go` in the
# shared directory `handshake` (it needs an untagged build that waits for it), so that its hook
# runs after the first builder left its chroot.
{
  nonce,
  handshake,
  sleep ? "600",
}:
let
  mk = import ./bash-derivation.nix { inherit nonce; };
  wait = mk "delay" {
    args = [
      "-c"
      "while [ ! -e ${handshake}/go ]; do sleep 0.05; done; echo > $out"
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
