# programs.cuda-sandbox in a real NixOS system with userborn: the combination that made
# programs.nix-required-mounts recurse for ever (NixOS/nixpkgs#488199, whose eval-test.nix
# evaluates the preset with `services.userborn.enable`). The stubs of ./module-eval.nix declare
# only the options this module touches, so a recursion through NixOS's own modules cannot show
# there: this needs a full Nixpkgs checkout, which CI does not have.
#
#   nix-instantiate --eval --strict --read-write-mode nix-tests/userborn-eval.nix \
#     --argstr nixpkgs /path/to/nixpkgs
#
# (nix-tests/run does it when NIXPKGS is set.) Each system's toplevel is instantiated, which
# evaluates every option, the assertions and the hook's config.toml; the result names them.
{ nixpkgs }:
let
  lib = import "${nixpkgs}/lib";
  evalSystem =
    modules:
    import "${nixpkgs}/nixos/lib/eval-config.nix" {
      system = null;
      modules = [
        ../nixos-module
        (
          { lib, ... }:
          {
            nixpkgs.hostPlatform = lib.mkDefault builtins.currentSystem;
            services.userborn.enable = true;
            fileSystems."/".device = "/dev/null";
            boot.loader.grub.enable = false;
            system.stateVersion = lib.trivial.release;
            programs.cuda-sandbox.enable = true;
          }
        )
      ]
      ++ modules;
    };
  systems = {
    # As NixOS/nixpkgs#488199's test: the preset (the default here), without and with graphics.
    preset = evalSystem [ ];
    preset-with-graphics = evalSystem [ { hardware.graphics.enable = true; } ];
    # The NixOS-CUDA builders' setting (nixos-cuda/infra), renamed.
    nixos-cuda-builder = evalSystem [
      {
        hardware.graphics.enable = true;
        services.xserver.videoDrivers = [ "nvidia" ];
        hardware.nvidia.open = true;
        nixpkgs.config.allowUnfree = true;
        programs.cuda-sandbox.allowedPatterns.nvidia-gpu.onFeatures = [ "cuda-ada" ];
      }
    ];
  };
  features = system: system.config.nix.settings.system-features;
in
assert lib.assertMsg (lib.elem "cuda-ada" (
  features systems.nixos-cuda-builder
)) "userborn-eval: cuda-ada is not among the system features of the NixOS-CUDA builders' setting";
assert lib.assertMsg (lib.elem "kvm" (
  features systems.preset
)) "userborn-eval: Nix's default system features were lost";
lib.mapAttrs (_: system: system.config.system.build.toplevel.drvPath) systems
