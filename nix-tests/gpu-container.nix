# The saxpy NixOS test in a container with the build's GPU (docs/nixos-tests.md): the flake's
# `legacyPackages.<system>.tests.cudaContainer`. NVIDIA's saxpy sample (Nixpkgs'
# cudaPackages.saxpy) runs in a systemd-nspawn container of the test, which sees exactly the
# GPU, driver and manifest the hook gave the test's build; before the script, the runner's
# checks pass in the container (lib.runGpuContainerTest).
#
# Not run on the development machine: it needs Nixpkgs with the test driver's containers
# (NixOS/nixpkgs#470248, #478109), a GPU, and a builder with the hook, `auto-allocate-uids` and
# the `uid-range` system feature (docs/nixos-tests.md). There:
#   nix build .#tests.cudaContainer -L
# nix-tests/gpu-container-test-eval.nix evaluates this file against stubs.
{
  # A package set with CUDA (allowUnfree; saxpy is built for its cudaCapabilities).
  pkgs,
  runGpuContainerTest,
}:
let
  inherit (pkgs.cudaPackages) saxpy;
in
runGpuContainerTest {
  inherit pkgs;
  test = {
    name = "saxpy-in-a-gpu-container";

    containers.container = {
      environment.systemPackages = [ saxpy ];
    };

    testScript = ''
      output = container.succeed("saxpy 2>&1")
      print(output)
      assert "Max error: 0.000000" in output, output
    '';
  };
}
