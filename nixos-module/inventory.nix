# programs.cuda-sandbox.inventory: the GPU inventory, each GPU's compute capability, which the
# hook reads to give a build requiring `cuda-sm-*` features GPUs that satisfy them
# (docs/data-centre.md, "Mixed hosts"); and programs.cuda-sandbox.tegraCapability, which gives
# a Jetson's GPU instead.
#
# `cuda-sandbox-check inventory` needs the driver (NVML) and /proc/driver/nvidia/gpus, which
# exist once the nvidia module is loaded: on NixOS that is when udev's coldplug or the first
# CUDA call loads it, with no unit that marks "the driver is up" to order after. So the unit
# runs at boot and again each time the module is added (a udev rule), retrying every 10 s
# while the driver does not answer. Until it has written the file, a build's `cuda-sm-*`
# features select no GPU (the hook says so on each such build): it is served as though it
# required none of them, as before the inventory existed, and the runner's `devices::features`
# check fails it on a GPU that lacks them.
{
  config,
  lib,
  ...
}:
let
  top = config.programs.cuda-sandbox;
  cfg = top.inventory;
  output = "${top.settings.runtime_dir}/inventory.json";
in
{
  options.programs.cuda-sandbox = {
    inventory.enable = lib.mkOption {
      type = lib.types.bool;
      default = top.tegraCapability == null;
      defaultText = lib.literalExpression "config.programs.cuda-sandbox.tegraCapability == null";
      description = ''
        Write the GPU inventory ({file}`<runtime_dir>/inventory.json`: each GPU's compute
        capability from the driver, keyed by its PCI bus address, PCI device id and
        `/dev/nvidiaN` minor) with `cuda-sandbox-check inventory`, from the oneshot unit
        `cuda-sandbox-inventory.service`, at boot and whenever the `nvidia` module is loaded.
        The hook reads it for builds requiring `cuda-sm-*` features: with
        {option}`programs.cuda-sandbox.settings.gpus_per_build` above 0 it leases them GPUs
        that satisfy those features, and on any host it fails at once a build that no GPU here
        satisfies. It re-checks every entry against the host on each such build.

        Before the unit has written the file (early in boot, or while the driver does not
        answer), and whenever it no longer matches the host, a build's `cuda-sm-*` features
        select no GPU: the build is served as though it required none of them, with a warning
        in its log naming why, and `cuda-sandbox-hook explain` says so. Off by default on a
        Jetson ({option}`programs.cuda-sandbox.tegraCapability` set), which has neither NVML
        nor {file}`/proc/driver/nvidia/gpus`.
      '';
    };

    tegraCapability = lib.mkOption {
      type = lib.types.nullOr (lib.types.strMatching "[0-9]+\\.[0-9]");
      default = null;
      example = "8.7";
      description = ''
        A Jetson's GPU's compute capability (`8.7` for Orin, `7.2` for Xavier), rendered as
        `tegra_capability`: a Jetson has no {file}`/proc/driver/nvidia/gpus` for a GPU
        inventory, so the hook holds builds requiring `cuda-sm-*` features to this capability
        instead.
      '';
    };
  };

  config = lib.mkIf top.enable (
    lib.mkMerge [
      (lib.mkIf (top.tegraCapability != null) {
        programs.cuda-sandbox.settings.tegra_capability = top.tegraCapability;
      })
      (lib.mkIf cfg.enable {
        systemd.services.cuda-sandbox-inventory = {
          description = "cuda-sandbox GPU inventory for builds requiring cuda-sm-* features";
          wantedBy = [ "multi-user.target" ];
          # NVML, from the driver link (the runner also finds it there through its RUNPATH).
          environment.LD_LIBRARY_PATH = "${top.driver.link}/lib";
          # Retry for as long as the driver takes to come up.
          unitConfig.StartLimitIntervalSec = 0;
          serviceConfig = {
            Type = "oneshot";
            ExecStart = "${top.package}/bin/cuda-sandbox-check inventory --output ${output}";
            Restart = "on-failure";
            RestartSec = 10;
          };
        };
        services.udev.extraRules = ''
          ACTION=="add", SUBSYSTEM=="module", KERNEL=="nvidia", TAG+="systemd", ENV{SYSTEMD_WANTS}+="cuda-sandbox-inventory.service"
        '';
      })
    ]
  );
}
