# Evaluation test of the GPU container test: nixos-module/test-container.nix
# (cuda-sandbox.testContainer) and flake.nix's lib.runGpuContainerTest, with the real Nixpkgs
# `lib` and the stubs of ./stubs.nix in place of NixOS's nspawn-container profile and the test
# framework (`runNixOSTest`), and docs/nixos-tests.md's two examples as written (the saxpy test is
# nix-tests/gpu-container.nix's; the module by hand is evaluated).
#
#   nix-instantiate --eval --strict --read-write-mode --json nix-tests/gpu-container-test-eval.nix --arg lib 'import /path/to/nixpkgs.lib/lib'
#
# Every check is an `assert`. The result holds the container launcher's script and the store
# paths it names, which nix-tests/test-container-launcher runs with the real runner and a
# stand-in systemd-nspawn launcher.
{ lib }:
let
  system = "x86_64-linux";
  stubs = import ./stubs.nix { inherit lib; };
  nixpkgs = import ./stub-nixpkgs.nix { inherit lib system; };
  flake = import ../flake.nix;
  outputs = flake.outputs {
    self = outputs // {
      outPath = toString ../.;
    };
    inherit nixpkgs;
  };

  pkgs = stubs.pkgs // {
    testers.runNixOSTest = stubs.runNixOSTest;
  };
  runner = stubs.pkgs.cuda-sandbox;

  # The saxpy test of docs/nixos-tests.md, as the flake's tests.cudaContainer builds it.
  saxpy = stubs.fakePackage "saxpy";
  gpuTest = import ./gpu-container.nix {
    pkgs = pkgs // {
      cudaPackages = { inherit saxpy; };
      cuda-sandbox = runner;
    };
    inherit (outputs.lib) runGpuContainerTest;
  };
  # Two containers, one whose name is no Python identifier, and a script that is a string.
  twoTest = outputs.lib.runGpuContainerTest {
    inherit pkgs runner;
    test = {
      name = "two";
      containers.a = { };
      containers."gpu-2" = { };
      testScript = "a.succeed(\"true\")\n";
    };
  };
  drv = gpuTest.drvAttrs;
  container = gpuTest.config.containers.container;
  launcher = container.system.build.nspawn;
  # The profile's own launcher (the stub's), which the wrapper must exec.
  profileLauncher = "${stubs.fakePackage "nspawn-profile-container"}/bin/run-container-nspawn";
  inherit (container.cuda-sandbox.testContainer) savedRun;

  # The module alone: off, on, and beside hardware.graphics.
  evalContainer =
    config:
    (lib.evalModules {
      modules = [
        stubs.module
        stubs.nspawnProfile
        ../nixos-module/test-container.nix
        { system.name = "machine"; }
        config
      ];
      specialArgs.pkgs = stubs.pkgs;
    }).config;
  off = evalContainer { };
  on = evalContainer { cuda-sandbox.testContainer.enable = true; };
  withGraphics = evalContainer {
    cuda-sandbox.testContainer.enable = true;
    hardware.graphics.enable = true;
  };
  failed = c: map (a: a.message) (lib.filter (a: !a.assertion) c.assertions);

  plain = stubs.runNixOSTest {
    name = "plain";
    containers.a = { };
    testScript = "";
  };

  # docs/nixos-tests.md shows the saxpy test as nix-tests/gpu-container.nix has it.
  testFile = builtins.readFile ./gpu-container.nix;
  example = lib.last (lib.splitString "\nin\n" testFile);
  docs = builtins.readFile ../docs/nixos-tests.md;

  # docs/nixos-tests.md's "The module by hand", evaluated as written with `pkgs` and the flake.
  byHandText =
    let
      section = lib.last (lib.splitString "## The module by hand\n" docs);
      afterFence = lib.last (lib.splitString "```nix\n" section);
    in
    lib.head (lib.splitString "```\n" afterFence);
  byHand = import (builtins.toFile "by-hand.nix" "{ pkgs, cuda-sandbox }:\n${byHandText}") {
    pkgs = pkgs // {
      cuda-sandbox = runner;
    };
    cuda-sandbox = outputs;
  };

  check = case: condition: lib.assertMsg condition "gpu-container-test-eval: ${case}";
  checks = [
    (check "the test asks for cuda and uid-range, beside its own features" (
      drv.requiredSystemFeatures == [
        "nixos-test"
        "kvm"
        "cuda"
        "uid-range"
      ]
    ))
    (check "the untagged test is unchanged" (
      plain.drvAttrs.requiredSystemFeatures == [
        "nixos-test"
        "kvm"
      ]
    ))
    (check "the build's /run is bound where the launchers read it, before the driver runs" (
      lib.hasPrefix "# The test driver hides /run" drv.buildCommand
      && lib.hasInfix "mkdir -p ${savedRun}\nmount --rbind /run ${savedRun}\n" drv.buildCommand
      && lib.hasSuffix "nixos-test-driver -o $out\n" drv.buildCommand
      && savedRun == "/cuda-sandbox-run"
    ))
    (check "mount comes from util-linux" (drv.nativeBuildInputs == [ stubs.pkgs.util-linux ]))
    (check "the runner's checks run in the container, before the test's own script" (
      gpuTest.config.testScriptString == ''
        with subtest("cuda-sandbox: the GPU this build was given, in container container"):
            print(container.succeed("cuda-sandbox-check --report /tmp/cuda-sandbox-report.json 2>&1"))
        output = container.succeed("saxpy 2>&1")
        print(output)
        assert "Max error: 0.000000" in output, output
      ''
    ))
    (check "the runner's checks run in each container, named as the test driver names them" (
      twoTest.config.testScriptString == ''
        with subtest("cuda-sandbox: the GPU this build was given, in container a"):
            print(a.succeed("cuda-sandbox-check --report /tmp/cuda-sandbox-report.json 2>&1"))
        with subtest("cuda-sandbox: the GPU this build was given, in container gpu-2"):
            print(gpu_2.succeed("cuda-sandbox-check --report /tmp/cuda-sandbox-report.json 2>&1"))
        a.succeed("true")
      ''
    ))
    (check "the runner defaults to the test's pkgs.cuda-sandbox" (
      gpuTest.config.containers.container.cuda-sandbox.testContainer.package == runner
    ))
    (check "docs/nixos-tests.md shows the saxpy test as nix-tests/gpu-container.nix has it" (
      lib.hasPrefix "runGpuContainerTest {" example && lib.hasInfix "```nix\n${example}```" docs
    ))
    (check "the module by hand (docs): tagged, /run kept where the launcher reads it, the wrapper" (
      byHand.drvAttrs.requiredSystemFeatures == drv.requiredSystemFeatures
      && lib.hasInfix "mount --rbind /run ${savedRun}\n" byHand.drvAttrs.buildCommand
      && lib.hasInfix "container-binds" byHand.config.containers.gpu.system.build.nspawn.text
    ))
    (check "saxpy is in the container" (
      lib.elem saxpy gpuTest.config.containers.container.environment.systemPackages
    ))
    (check "every container has the module, with the helper's runner" (
      lib.all (c: c.cuda-sandbox.testContainer.enable && c.cuda-sandbox.testContainer.package == runner) (
        lib.attrValues twoTest.config.containers
      )
    ))
    (check "the launcher keeps the name the test driver reads the machine's from" (
      launcher.name == "run-container-nspawn"
    ))
    (check "the launcher asks the runner for the binds, then execs the profile's launcher with them" (
      lib.hasInfix "${runner}/bin/cuda-sandbox-check container-binds --run-dir \"$run\"" launcher.text
      && lib.hasInfix "exec ${profileLauncher} \"\${gpu[@]}\" \"$@\"" launcher.text
    ))
    (check "the runner is in the container" (lib.elem runner container.environment.systemPackages))
    (check "off: the profile's launcher, untouched" (
      !(off.system.build.nspawn ? text) && off.environment.systemPackages == [ ]
    ))
    (check "on: the wrapper" (lib.hasInfix "container-binds" on.system.build.nspawn.text))
    (check "on: no failed assertion" (failed on == [ ]))
    (check "hardware.graphics in the container is refused" (
      lib.length (failed withGraphics) == 1
      && lib.hasInfix "leave it off in\nthis container" (lib.head (failed withGraphics))
    ))
  ];
in
assert lib.all lib.id checks;
{
  passed = lib.length checks;
  launcher = {
    inherit (launcher) text;
    inherit savedRun profileLauncher;
    runner = "${runner}/bin/cuda-sandbox-check";
  };
}
