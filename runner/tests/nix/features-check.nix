# A tagged derivation requiring `features` (space-separated) whose builder runs the
# devices::features check with cuda-sandbox-check. Built by runner/tests/nix_sandbox/.
# With `structured = "1"` it uses structured attrs: no attribute is exported, so the builder
# (bash) takes $out and the runner's path from .attrs.sh and the runner reads the features
# from .attrs.json; without, the runner reads $requiredSystemFeatures. The builder prints
# $NIX_ATTRS_JSON_FILE and $NIX_BUILD_TOP, which the test compares with what each Nix sets.
{
  runner,
  nonce,
  features,
  structured ? "",
}:
derivation (
  {
    name = "features-check";
    system = builtins.currentSystem;
    builder = "/bin/bash";
    args = [
      "-c"
      ''
        if [ -e "$NIX_BUILD_TOP/.attrs.sh" ]; then
          source "$NIX_BUILD_TOP/.attrs.sh"
          out=''${outputs[out]}
        fi
        echo "attrs-json-file: ''${NIX_ATTRS_JSON_FILE-unset}" >&2
        echo "build-top: $NIX_BUILD_TOP" >&2
        LD_LIBRARY_PATH=/run/opengl-driver/lib exec "$runner" --report "$out" \
          --exact devices::features
      ''
    ];
    requiredSystemFeatures = builtins.filter builtins.isString (builtins.split " +" features);
    runner = builtins.path {
      path = /. + runner;
      name = "cuda-sandbox-check";
    };
    inherit nonce;
  }
  // (if structured == "" then { } else { __structuredAttrs = true; })
)
