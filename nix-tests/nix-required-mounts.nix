# Facts, not code: the settings of Nixpkgs' current programs.nix-required-mounts module
# (nixos/modules/programs/nix-required-mounts.nix at master, read in NixOS/nixpkgs with the
# changes of NixOS/nixpkgs#488199, #500971, #501095 and #518786), as plain data for
# ./module-eval.nix's migration cases. Each value is what that module declares or defines;
# `mkDefault` marks a definition made at that priority. Nothing here is evaluated against
# Nixpkgs: when the module there changes, this file is updated by hand from it.
{
  # Every pattern (allowedPatterns.<name>): its options and their defaults.
  pattern = {
    options = [
      "onFeatures"
      "paths"
      "safePrefixes"
      "unsafeFollowSymlinks"
    ];
    onFeatures.default = "[ <name> ]";
    safePrefixes.default = [ builtins.storeDir ];
    unsafeFollowSymlinks.default = false;
  };

  presets.nvidia-gpu = {
    # The package's pattern nvidia-gpu (pkgs/by-name/ni/nix-required-mounts/package.nix).
    onFeatures = [
      "cuda"
      "gpu"
      "nvidia-gpu"
      "opengl"
    ];
    unsafeFollowSymlinks = true;
    mkDefault = {
      "hardware.graphics.enable" = true;
    };
  };

  presets.zluda = {
    onFeatures = [
      "amd-gpu"
      "cuda"
      "gpu"
      "opengl"
    ];
    # In this order; <driverLink> is pkgs.addDriverRunpath.driverLink, <extraPackages>
    # config.hardware.graphics.extraPackages (appended).
    paths = [
      "<driverLink>"
      "/dev/dri"
      "/dev/kfd"
      "/sys/devices/virtual/kfd"
      "/sys/dev/char/226:*"
      "<extraPackages>"
    ];
    unsafeFollowSymlinks = true;
    mkDefault = {
      "hardware.amdgpu.zluda.enable" = true;
      "hardware.graphics.enable" = true;
    };
  };
}
