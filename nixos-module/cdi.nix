# programs.cuda-sandbox.cdi: the rule `nvidia` from the CDI spec NixOS generates with
# `hardware.nvidia-container-toolkit.enable`, instead of the built-in device globs.
#
# Facts from NixOS/nixpkgs, nixos/modules/services/hardware/nvidia-container-toolkit/
# (cdi-generate.nix at 98dbf2793a56c26a11f06374852a2491326f4fff, and the default.nix of that
# revision): the oneshot unit `nvidia-container-toolkit-cdi-generator.service`
# (RemainAfterExit, RuntimeDirectory `cdi`, wanted by multi-user.target, after udev has
# settled, required by docker/podman and by nothing else) runs `nvidia-ctk cdi generate
# --format json --library-search-path <driver>/lib --device-name-strategy index …` and writes
# its output, with the module's extra mounts appended, to
# `$RUNTIME_DIRECTORY/nvidia-container-toolkit.json`: /run/cdi/nvidia-container-toolkit.json.
# Nothing orders it before nix-daemon, so a build can start before the spec exists.
{
  config,
  lib,
  ...
}:
let
  cfg = config.programs.cuda-sandbox.cdi;
  toolkit = config.hardware.nvidia-container-toolkit.enable or false;
  # The hook's spec directories: the user's, else the built-in ones (hook/src/cdi/mod.rs).
  specDirs =
    config.programs.cuda-sandbox.settings.cdi_spec_dirs or [
      "/etc/cdi"
      "/var/run/cdi"
      "/run/cdi"
    ];
in
{
  options.programs.cuda-sandbox.cdi = {
    enable = lib.mkOption {
      type = lib.types.bool;
      default = toolkit;
      defaultText = lib.literalExpression "config.hardware.nvidia-container-toolkit.enable";
      description = ''
        Take the rule `nvidia`'s devices from the CDI spec that
        {option}`hardware.nvidia-container-toolkit.enable` generates at boot
        ({file}`/run/cdi/nvidia-container-toolkit.json`, kind `nvidia.com/gpu`), instead of the
        built-in device globs and MIG source: the rule names the CDI devices
        {option}`programs.cuda-sandbox.cdi.devices`, and the driver stays
        {option}`programs.cuda-sandbox.driver` (the driver link; without it, the spec's
        libraries are bound at the link). Jetson's device globs stay, as Jetson's CSV-mode spec
        lists no device nodes. The hook reads `/run/cdi` among its spec directories.

        Before the unit `nvidia-container-toolkit-cdi-generator.service` has written the spec
        (early in boot, or when it failed), a tagged build FAILS, with the fix: start that unit
        (`systemctl start nvidia-container-toolkit-cdi-generator.service`; `journalctl -u` it to
        see why it did not run). It does not fall back to the built-in globs: the spec is what
        was chosen to say which devices a build gets (one GPU or one MIG device rather than
        all), and a build must not get other devices, or none of a device it was promised,
        depending on how far boot has come; the hook never widens what a build sees on an
        error, and a failed build can be run again once the unit has run.
      '';
    };

    devices = lib.mkOption {
      type = lib.types.nonEmptyListOf (lib.types.strMatching "[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?");
      default = [ "all" ];
      example = [
        "0"
        "1"
      ];
      description = ''
        The devices of the spec the rule names, each as `nvidia.com/gpu=<name>`: `all` (every
        GPU and MIG device the spec lists), or single ones as
        {option}`hardware.nvidia-container-toolkit.device-name-strategy` names them (`0`,
        `GPU-<uuid>`, MIG `0:1`; `nvidia-ctk cdi list` shows them). With
        {option}`programs.cuda-sandbox.settings.gpus_per_build` above 0, each build is leased
        its own GPUs among the `/dev/nvidiaN` nodes these devices list, and gets only the
        leased GPUs' devices of the spec, with the spec's top-level edits (`nvidiactl`,
        `nvidia-uvm`, the driver's mounts): `all` then means the devices of this spec that
        belong to one leased GPU (`0`, `GPU-<uuid>`, its MIG devices, each matched to its GPU
        by the one `/dev/nvidiaN` node it lists), with their own nodes (`/dev/dri/card*`,
        `/dev/dri/renderD*`), and never another GPU's. A node `all` lists that no one GPU's
        device lists is given to no build.
      '';
    };
  };

  config = lib.mkIf (config.programs.cuda-sandbox.enable && cfg.enable) {
    assertions = [
      {
        assertion = lib.elem "/run/cdi" specDirs;
        message = ''
          programs.cuda-sandbox.cdi.enable reads the spec NixOS writes to
          /run/cdi/nvidia-container-toolkit.json, but programs.cuda-sandbox.settings.cdi_spec_dirs
          (${lib.concatStringsSep ", " specDirs}) leaves out /run/cdi: add "/run/cdi" to it, or
          remove the setting (the hook then reads /etc/cdi, /var/run/cdi and /run/cdi).
        '';
      }
    ];
    warnings = lib.optional (!toolkit) ''
      programs.cuda-sandbox.cdi.enable is set but hardware.nvidia-container-toolkit.enable is
      not, so nothing on this system writes /run/cdi/nvidia-container-toolkit.json: tagged
      builds fail until a spec in /etc/cdi or /run/cdi defines ${
        lib.concatMapStringsSep ", " (d: "nvidia.com/gpu=${d}") cfg.devices
      }.
    '';
  };
}
