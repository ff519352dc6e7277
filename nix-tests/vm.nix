# NixOS VM test (the flake's `checks.<system>.vm`): programs.cuda-sandbox enabled on a machine
# without a GPU, with a fake device tree of real character devices and the FAKE driver of
# fixtures/ (built by the flake's package, output `fixtures`). Through the real nix-daemon:
#   - a tagged derivation (tests-gpu's `all`) gets the devices and the driver and passes every
#     check of the runner;
#   - an untagged one (`no-gpu`) sees no device, no driver and no manifest.
#
# Not run on the development machine (no Nixpkgs, no KVM there); it runs with
# `nix build .#checks.x86_64-linux.vm` wherever Nixpkgs and KVM are.
# The package's `passthru.tests.vm` (the flake's `checks.<system>.vm` is the same derivation).
{
  runCommand,
  writeText,
  testers,
  package,
  module,
}:
let
  fakeRoot = "/var/lib/fake-gpu";

  fakeDriver = runCommand "fake-nvidia-driver-535" { } ''
    ${package.fixtures}/bin/make-fake-driver $out/lib --artifacts ${package.fixtures}/lib \
      --cuda-version 12.2 --kernel-driver 535.104.05
  '';

  # Evaluated inside the VM: tests-gpu with the runner that is in the VM's store.
  testsNix = writeText "cuda-sandbox-tests.nix" ''
    import ${../tests-gpu} {
      runner = { outPath = builtins.storePath "${package}"; };
      libraryPath = null;
      saxpyElements = 1048576;
    }
  '';
in
testers.runNixOSTest {
  name = "cuda-sandbox";

  nodes.machine =
    { lib, ... }:
    {
      imports = [ module ];

      programs.cuda-sandbox = {
        enable = true;
        inherit package;
        # Devices and the driver link are looked up in the fake tree; store paths are not.
        settings.host_root = fakeRoot;
      };
      # The driver comes from the fake tree, not from hardware.graphics.
      hardware.graphics.enable = false;

      nix.settings.substituters = lib.mkForce [ ];
      virtualisation.writableStore = true;

      environment.etc."cuda-sandbox-tests.nix".source = testsNix;

      # The device nodes a loaded NVIDIA driver would have made (majors as the real driver's;
      # nvidia-uvm's is dynamic), the kernel driver's version file, and the driver link.
      systemd.services.fake-nvidia-devices = {
        wantedBy = [ "multi-user.target" ];
        before = [ "nix-daemon.service" ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
        };
        script = ''
          mkdir -p ${fakeRoot}/dev ${fakeRoot}/proc/driver/nvidia ${fakeRoot}/run
          mknod -m 666 ${fakeRoot}/dev/nvidia0 c 195 0
          mknod -m 666 ${fakeRoot}/dev/nvidiactl c 195 255
          mknod -m 666 ${fakeRoot}/dev/nvidia-uvm c 235 0
          echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  (FAKE, cuda-sandbox fixtures)" \
            > ${fakeRoot}/proc/driver/nvidia/version
          ln -sfn ${fakeDriver} ${fakeRoot}/run/opengl-driver
        '';
      };
    };

  testScript = ''
    machine.wait_for_unit("multi-user.target")
    machine.wait_for_unit("fake-nvidia-devices.service")

    with subtest("the module's configuration"):
        print(machine.succeed("cuda-sandbox-hook check-config"))
        print(machine.succeed("cuda-sandbox-hook explain --features cuda"))
        line = machine.succeed("grep '^system-features = ' /etc/nix/nix.conf")
        for feature in ["nixos-test", "benchmark", "big-parallel", "kvm", "cuda", "gpu", "nvidia-gpu", "opengl"]:
            assert f" {feature}" in line, f"{feature} missing from {line}"
        machine.succeed("grep -q '^pre-build-hook = ${package}/bin/cuda-sandbox-hook$' /etc/nix/nix.conf")
        # No NVIDIA kernel driver here: the udev rule that makes /dev/nvidia-uvm waits for it.
        machine.succeed("grep -q 'KERNEL==\"nvidia_uvm\"' /etc/udev/rules.d/99-local.rules")

    with subtest("a tagged derivation gets the GPU and the driver, and passes every check"):
        report = machine.succeed(
            "NIX_REMOTE=daemon nix-build --no-out-link /etc/cuda-sandbox-tests.nix -A all"
        ).strip()
        machine.succeed(f"grep -q '\"summary\"' {report}")

    with subtest("an untagged derivation sees no GPU and no driver"):
        machine.succeed("NIX_REMOTE=daemon nix-build --no-out-link /etc/cuda-sandbox-tests.nix -A no-gpu")
  '';
}
