# A tagged derivation whose builder is cuda-sandbox-check (no shell), finding libcuda through
# `libraryPath` (LD_LIBRARY_PATH), as a nixpkgs binary finds it through DT_RUNPATH. Built by
# runner/tests/driver_choice_e2e/; the runner reads the hook's manifest by default and its
# report goes to $out. `libraryPath` is a plain string, so Nix adds nothing to the sandbox
# for it: what the build sees is what the hook exposed. `nonce` forces a fresh build.
{
  runner,
  nonce,
  libraryPath,
  expectDriver ? "",
}:
derivation {
  name = "gpu-check-driver-choice";
  system = builtins.currentSystem;
  builder = builtins.path {
    path = /. + runner;
    name = "cuda-sandbox-check";
  };
  args = [
    "--saxpy-elements"
    "4096"
  ]
  ++ (
    if expectDriver == "" then
      [ ]
    else
      [
        "--expect-driver"
        expectDriver
      ]
  );
  requiredSystemFeatures = [ "cuda" ];
  LD_LIBRARY_PATH = builtins.unsafeDiscardStringContext libraryPath;
  inherit nonce;
}
