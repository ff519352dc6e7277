# A GPU check that requires `features` (space-separated), built by hook/tests/fleet_ssh_ng/
# through a fleet of ssh-ng builders: its builder is cuda-sandbox-check (`runner`, the built
# runner's absolute path, copied into the store), which runs devices::features on the GPU the
# builder's hook exposed and writes its report to $out. `nonce` forces a fresh build each run.
{
  runner,
  nonce,
  features,
}:
derivation {
  name = "fleet-check";
  system = builtins.currentSystem;
  builder = builtins.path {
    path = /. + runner;
    name = "cuda-sandbox-check";
  };
  args = [
    "--exact"
    "devices::features"
  ];
  requiredSystemFeatures = builtins.filter builtins.isString (builtins.split " +" features);
  # Where the builder's hook mounts the driver.
  LD_LIBRARY_PATH = "/run/opengl-driver/lib";
  inherit nonce;
}
