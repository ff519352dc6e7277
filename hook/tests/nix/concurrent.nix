# `count` tagged derivations that report what the sandbox shows them, for
# hook/tests/concurrency/. Each writes to $out: `start <time>`, one `char <node>` line per
# NVIDIA device node it sees (MIG capability nodes and DRM nodes included), its manifest, `read`/`unreadable` for each of `readPaths`, then
# sleeps `sleep` seconds and writes `end <time>`. `nonce` forces fresh builds; it is also in
# the builder's command line, so a test can find a builder among the host's processes.
# `features`: the required system features, space-separated.
{
  nonce,
  count ? "16",
  readPaths ? "",
  sleep ? "0",
  gpus ? "",
  prefix ? "concurrent",
  features ? "cuda",
}:
let
  report = import ./report.nix;
  build =
    i:
    derivation (
      {
        name = "${prefix}-${toString i}";
        inherit nonce;
        system = builtins.currentSystem;
        builder = "/bin/bash";
        PATH = "/bin:/usr/bin";
        READ_PATHS = builtins.unsafeDiscardStringContext readPaths;
        SLEEP = sleep;
        requiredSystemFeatures = builtins.filter (f: builtins.isString f && f != "") (
          builtins.split " " features
        );
        args = [
          "-c"
          ''
            set -u
            {
              echo "start $(date +%s.%N)"
              for d in /dev/nvidia* /dev/nvidia-caps/* /dev/dri/* /dev/render-alias; do
                if [ -c "$d" ]; then echo "char $d"; fi
              done
              ${report.manifest}
              ${report.readPaths}
            } > "$out"
            sleep "$SLEEP" # builder ${nonce}
            echo "end $(date +%s.%N)" >> "$out"
          ''
        ];
      }
      // (if gpus != "" then { cudaSandboxGpus = gpus; } else { })
    );
in
builtins.listToAttrs (
  builtins.genList (i: {
    name = "b${toString i}";
    value = build i;
  }) (builtins.fromJSON count)
)
