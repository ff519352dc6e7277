# Tagged derivations that render, inside the real sandbox, the systemd-nspawn binds a NixOS
# test container would get (`cuda-sandbox-check container-binds`), and keep what they saw:
# $out/manifest.json (the hook's manifest), $out/binds (the arguments), $out/sources (each
# bind's source as this build sees it: `stat -L` type and path) and $out/closure (which of
# `closure`'s store paths this build sees). Built by runner/tests/container_binds/.
# `a` and `b` differ only in name, for two builds at once; each sleeps `sleep` seconds after
# rendering, so that two builds hold their leases together.
{
  runner,
  nonce,
  closure ? "",
  sleep ? "0",
}:
let
  check =
    name:
    derivation {
      name = "container-binds-${name}";
      system = builtins.currentSystem;
      builder = "/bin/sh";
      PATH = "/bin:/usr/bin";
      runner = builtins.path {
        path = /. + runner;
        name = "cuda-sandbox-check";
      };
      CLOSURE = closure;
      SLEEP = sleep;
      inherit nonce;
      requiredSystemFeatures = [ "cuda" ];
      args = [
        "-c"
        ''
          set -eu
          mkdir "$out"
          cp /run/cuda-sandbox/manifest.json "$out/manifest.json"
          "$runner" container-binds > "$out/binds"
          sed -e 's/^--bind[-ro]*=//' -e 's/:.*//' "$out/binds" | while read -r source; do
            stat -L -c '%F %n' "$source"
          done > "$out/sources"
          for p in $CLOSURE; do if [ -e "$p" ]; then echo "$p"; fi; done > "$out/closure"
          sleep "$SLEEP"
        ''
      ];
    };
in
{
  a = check "a";
  b = check "b";
}
