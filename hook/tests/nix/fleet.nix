# A GPU check that requires `features` (space-separated), built by hook/tests/fleet_ssh_ng.rs
# through a fleet of ssh-ng builders: it records whether the builder's hook gave it a GPU node.
# `nonce` forces a fresh build each run.
{
  nonce,
  features,
}:
derivation {
  name = "fleet-check";
  system = builtins.currentSystem;
  builder = "/bin/sh";
  args = [
    "-c"
    "if [ -c /dev/nvidia0 ]; then echo gpu > $out; else echo no-gpu > $out; fi"
  ];
  requiredSystemFeatures = builtins.filter builtins.isString (builtins.split " +" features);
  inherit nonce;
}
