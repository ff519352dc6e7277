# A tagged derivation whose builder is cuda-sandbox-check itself (no shell): it checks the GPU
# the hook exposed and writes its JSON report to $out. Built by runner/tests/nix_sandbox/.
# `runner` is the absolute path of the built runner (copied into the store); `nonce` forces a
# fresh build each run.
# `threads` ("" = libtest's default) makes the log's "test NAME ... ok" lines whole for tests
# that read the log.
{
  runner,
  nonce,
  expectDriver ? "/run/opengl-driver/lib",
  threads ? "",
}:
derivation {
  name = "gpu-check";
  system = builtins.currentSystem;
  builder = builtins.path {
    path = /. + runner;
    name = "cuda-sandbox-check";
  };
  args = [
    "--expect-driver"
    expectDriver
    "--saxpy-elements"
    "65536"
  ]
  ++ (
    if threads == "" then
      [ ]
    else
      [
        "--test-threads"
        threads
      ]
  );
  requiredSystemFeatures = [ "cuda" ];
  # Where the hook mounts the driver; nixpkgs binaries get it through RUNPATH instead.
  LD_LIBRARY_PATH = "/run/opengl-driver/lib";
  inherit nonce;
}
