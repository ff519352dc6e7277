# cuda-sandbox.testContainer: a container of a NixOS test (`containers.<name>` of
# `runNixOSTest`, which Nixpkgs' test driver starts with systemd-nspawn inside the test's own
# build sandbox) gets exactly the GPU the hook gave that build: its device nodes, the driver
# link, the /sys topology when the build has it, and the hook's manifest, so that
# `cuda-sandbox-check` inside the container judges the same GPU.
#
# The test's derivation cannot know the host, so nothing here is decided at evaluation: the
# container's launcher (`system.build.nspawn`, whose `bin/run-<name>-nspawn` the test driver
# runs, passing its arguments on to systemd-nspawn) is wrapped, and the wrapper asks
# `cuda-sandbox-check container-binds` for the binds when the container starts, from
# /run/cuda-sandbox/manifest.json. The profile's own launcher is taken from the same
# configuration evaluated without the wrapper (`extendModules`), so the container runs the same
# system either way.
#
# The test driver mounts a tmpfs over /run before it starts a container when /run is not
# writable, which in a build it is not: Nix made /run as the host's root, a user the build's
# user namespace does not map. That hides what the hook put under /run. The GPU test helper
# (the flake's `lib.runGpuContainerTest`) binds the build's /run at `savedRun` below before the
# driver starts; the launcher reads from there when it holds a manifest, else from /run (a
# driver run outside a sandbox, or one that left /run alone).
#
# Import it into a test's container (the flake's `nixosModules.testContainer`), or let
# `lib.runGpuContainerTest` do it for every container of a test.
{
  config,
  lib,
  pkgs,
  extendModules,
  ...
}:
let
  cfg = config.cuda-sandbox.testContainer;
  name = config.system.name;

  # Where the GPU test helper binds the build's /run; flake.nix's runGpuContainerTest binds it
  # here (nix-tests/module-eval.nix holds the two to the same path).
  savedRun = "/cuda-sandbox-run";

  # The profile's launcher: this configuration without the wrapper.
  unwrapped =
    (extendModules {
      modules = [ { cuda-sandbox.testContainer.wrapLauncher = false; } ];
    }).config.system.build.nspawn;

  launcher = pkgs.writeShellScriptBin "run-${name}-nspawn" ''
    # ${name}: the container with the GPU this build was given (cuda-sandbox.testContainer).
    set -eu
    run=/run
    if [ -e ${savedRun}/cuda-sandbox/manifest.json ]; then run=${savedRun}; fi
    binds=$(${cfg.package}/bin/cuda-sandbox-check container-binds --run-dir "$run")
    mapfile -t gpu <<<"$binds"
    exec ${unwrapped}/bin/run-${name}-nspawn "''${gpu[@]}" "$@"
  '';
in
{
  options.cuda-sandbox.testContainer = {
    enable = lib.mkEnableOption "the build's GPU in this NixOS test container, from the hook's manifest";

    package = lib.mkOption {
      type = lib.types.package;
      default = pkgs.cuda-sandbox or (pkgs.callPackage ../package.nix { });
      defaultText = lib.literalExpression "pkgs.cuda-sandbox or (pkgs.callPackage ./cuda-sandbox/package.nix { })";
      description = "The cuda-sandbox package: its `cuda-sandbox-check` renders the binds and runs in the container.";
    };

    wrapLauncher = lib.mkOption {
      type = lib.types.bool;
      default = true;
      internal = true;
      description = "Whether `system.build.nspawn` is the wrapper; false gives the profile's own launcher.";
    };

    savedRun = lib.mkOption {
      type = lib.types.str;
      default = savedRun;
      readOnly = true;
      internal = true;
      description = "Where the GPU test helper binds the build's /run before the test driver hides it.";
    };
  };

  config = lib.mkIf cfg.enable {
    system.build.nspawn = lib.mkIf cfg.wrapLauncher (lib.mkForce launcher);

    environment.systemPackages = [ cfg.package ];

    assertions = [
      {
        # NixOS would put its own link at /run/opengl-driver, where the build's driver is bound.
        assertion = !config.hardware.graphics.enable;
        message = ''
          cuda-sandbox.testContainer binds the build's driver at /run/opengl-driver, which
          hardware.graphics.enable would replace with the container's own: leave it off in
          this container.'';
      }
    ];
  };
}
