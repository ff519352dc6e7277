# programs.cuda-sandbox: the cuda-sandbox-hook as the Nix daemon's pre-build-hook, so that
# derivations tagged `requiredSystemFeatures = [ "cuda" ]` see the NVIDIA GPU and the driver in
# the sandbox, and every other derivation sees nothing.
#
# The flake's `nixosModules.default` imports this file and supplies `package`; used without the
# flake, set `programs.cuda-sandbox.package` (or add the flake's overlay).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.programs.cuda-sandbox;
  settingsFormat = pkgs.formats.toml { };

  # TOML has no null: an unset optional key is left out, so the hook applies its own default.
  dropNulls = lib.filterAttrs (_: value: value != null);

  # An entry is either a bare string (the glob or path) or the full record.
  entryType =
    key: extraOptions:
    lib.types.coercedTo lib.types.str (value: { ${key} = value; }) (
      lib.types.submodule {
        options = {
          ${key} = lib.mkOption {
            type = lib.types.str;
            description = "Absolute ${key}.";
          };
          required = lib.mkOption {
            type = lib.types.bool;
            default = false;
            description = "Fail tagged builds (with the hint) when this is missing.";
          };
          hint = lib.mkOption {
            type = lib.types.nullOr lib.types.str;
            default = null;
            description = "The fix printed when a required entry is missing.";
          };
        }
        // extraOptions;
      }
    );

  deviceType = entryType "glob" {
    platform = lib.mkOption {
      type = lib.types.nullOr (
        lib.types.enum [
          "discrete"
          "tegra"
        ]
      );
      default = null;
      description = "Only on this kind of host (Jetson is `tegra`); null: on every host.";
    };
  };

  pathType = entryType "path" { };

  # The device nodes of DESIGN.md §5, as in the hook's built-in default. Discrete GPUs need
  # nvidiactl, nvidia-uvm and at least one nvidiaN; Jetson needs nvmap.
  defaultDevices =
    let
      discrete = glob: {
        inherit glob;
        required = true;
        platform = "discrete";
      };
      optional = glob: { inherit glob; };
      tegra =
        required: glob:
        {
          inherit glob;
          platform = "tegra";
        }
        // lib.optionalAttrs required { required = true; };
    in
    [
      (discrete "/dev/nvidiactl")
      (
        discrete "/dev/nvidia-uvm"
        // {
          hint =
            "the node is created lazily: run `nvidia-modprobe -u -c=0` "
            + "(programs.cuda-sandbox.createUvmNode does it at boot)";
        }
      )
      (discrete "/dev/nvidia[0-9]*")
      (optional "/dev/nvidia-uvm-tools")
      (optional "/dev/nvidia-modeset")
      (optional "/dev/nvidia-caps/nvidia-cap*")
      (optional "/dev/nvidia-caps-imex-channels/*")
      (optional "/dev/dri/renderD*")
      (optional "/dev/dri/card*")
      (tegra true "/dev/nvmap")
      (tegra false "/dev/nvhost-*")
      (tegra false "/dev/nvgpu/igpu0/*")
      (tegra false "/dev/nvsciipc")
      (tegra false "/dev/host1x-fence")
    ];

  # nixpkgs binaries carry `${cuda_compat}/compat` in DT_RUNPATH; the hook wants that directory.
  compatDir = entry: if lib.isDerivation entry then "${entry}/compat" else entry;

  # The rule the options describe; `settings.rule` definitions are appended to it.
  rule = {
    name = "nvidia";
    inherit (cfg) features;
    device = map dropNulls (defaultDevices ++ cfg.extraDevices);
    driver = {
      inherit (cfg.driver) link required;
      # NixOS has no driver in the loader cache or /usr/lib: the link is the only source.
      host_libraries = false;
      compat = map compatDir cfg.compat;
    };
  }
  // lib.optionalAttrs (cfg.extraPaths != [ ]) { path = map dropNulls cfg.extraPaths; };

  missingFeatures = lib.subtractLists config.nix.settings.system-features cfg.features;
in
{
  options.programs.cuda-sandbox = {
    enable = lib.mkEnableOption ''
      cuda-sandbox: the NVIDIA GPU and the CUDA driver inside the Nix build sandbox, for
      derivations that require one of {option}`programs.cuda-sandbox.features`
    '';

    package = lib.mkPackageOption pkgs "cuda-sandbox" { };

    features = lib.mkOption {
      type = lib.types.listOf (lib.types.strMatching "[^[:space:]]+");
      default = [
        "cuda"
        "gpu"
        "nvidia-gpu"
        "opengl"
      ];
      description = ''
        The `requiredSystemFeatures` that get the GPU. They are added to
        {option}`nix.settings.system-features` (keeping Nix's defaults), so the daemon
        accepts such derivations at all.
      '';
    };

    driver = {
      link = lib.mkOption {
        type = lib.types.str;
        default = "/run/opengl-driver";
        description = ''
          The driver link, exposed with its store closure. On NixOS
          {option}`hardware.graphics` makes `/run/opengl-driver` point at
          {option}`hardware.graphics.package` and {option}`hardware.graphics.extraPackages`,
          where `hardware.nvidia` puts the driver; nixpkgs binaries find `libcuda.so.1` there
          through their DT_RUNPATH.
        '';
      };
      required = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = "Fail tagged builds (naming the fix) when no driver is found.";
      };
    };

    compat = lib.mkOption {
      type = lib.types.listOf (lib.types.either lib.types.package lib.types.str);
      default = [ ];
      example = lib.literalExpression ''[ pkgs.cudaPackages.cuda_compat ]'';
      description = ''
        `cuda_compat` drivers to consider: packages (their `compat/` directory is used) or
        absolute directory globs. The hook picks one only when it supports the host's kernel
        driver and is newer than it (data-center GPUs and Jetson only).
      '';
    };

    extraDevices = lib.mkOption {
      type = lib.types.listOf deviceType;
      default = [ ];
      example = [
        "/dev/infiniband/uverbs*"
        {
          glob = "/dev/nvidia-fs*";
          required = true;
          hint = "load nvidia-fs";
        }
      ];
      description = "Device globs exposed in addition to the NVIDIA ones.";
    };

    extraPaths = lib.mkOption {
      type = lib.types.listOf pathType;
      default = [ ];
      example = [ "/etc/nvidia" ];
      description = "Host paths exposed at the same place (symlinks and store closures followed).";
    };

    createUvmNode = lib.mkOption {
      type = lib.types.bool;
      default = true;
      description = ''
        Load `nvidia-uvm` and create `/dev/nvidia-uvm` at boot. The driver creates the node
        lazily (on the first CUDA call outside a sandbox), and the sandbox cannot create it,
        so without this a freshly booted builder fails its first CUDA builds.
      '';
    };

    settings = lib.mkOption {
      type = settingsFormat.type;
      default = { };
      example = {
        closure_cache = "/var/cache/cuda-sandbox/closures";
        rule = [
          {
            name = "infiniband";
            features = [ "rdma" ];
            device = [ { glob = "/dev/infiniband/*"; } ];
          }
        ];
      };
      description = ''
        The hook's configuration, rendered to {file}`/etc/cuda-sandbox/config.toml` (see the
        configuration reference in the README). The options above define the rule `nvidia`;
        rules given here are added after it (`lib.mkForce` replaces it).
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    # mkBefore: the module's rule comes first whatever the order of imports.
    programs.cuda-sandbox.settings.rule = lib.mkBefore [ rule ];

    environment.etc."cuda-sandbox/config.toml".source =
      settingsFormat.generate "cuda-sandbox.toml" cfg.settings;

    nix.settings = {
      pre-build-hook = "${cfg.package}/bin/cuda-sandbox-hook";
      # Nixpkgs sets its defaults (nixos-test, benchmark, big-parallel, kvm, gccarch-*) with
      # mkDefault. A plain definition would replace them (the bug of programs.nix-required-mounts);
      # mkOptionDefault would lose to them. At mkDefault priority the lists concatenate, and a
      # user's own plain definition still wins: the assertion below then names what is missing.
      system-features = lib.mkDefault cfg.features;
    };

    systemd.services.cuda-sandbox-nvidia-uvm = lib.mkIf cfg.createUvmNode {
      description = "Create /dev/nvidia-uvm for CUDA builds in the Nix sandbox";
      wantedBy = [ "multi-user.target" ];
      before = [ "nix-daemon.service" ];
      after = [ "systemd-modules-load.service" ];
      # Only with the NVIDIA kernel driver loaded; Jetson has no nvidia-uvm.
      unitConfig.ConditionPathExists = [
        "/proc/driver/nvidia/version"
        "!/etc/nv_tegra_release"
      ];
      serviceConfig = {
        Type = "oneshot";
        RemainAfterExit = true;
      };
      path = [
        pkgs.kmod
        pkgs.coreutils
        pkgs.gnugrep
      ];
      # What `nvidia-modprobe -u -c=0` does, without its setuid helper: the major number of
      # nvidia-uvm is dynamic, so read it from /proc/devices.
      script = ''
        modprobe nvidia-uvm
        major=$(grep -m1 ' nvidia-uvm$' /proc/devices | cut -d ' ' -f 1)
        if [ -z "$major" ]; then
          echo "nvidia-uvm is loaded but not in /proc/devices" >&2
          exit 1
        fi
        [ -c /dev/nvidia-uvm ] || mknod -m 666 /dev/nvidia-uvm c "$major" 0
        [ -c /dev/nvidia-uvm-tools ] || mknod -m 666 /dev/nvidia-uvm-tools c "$major" 1
      '';
    };

    assertions = [
      {
        assertion = config.nix.settings.sandbox != false;
        message = ''
          programs.cuda-sandbox: nix.settings.sandbox is false. Nix runs a pre-build-hook only
          for sandboxed builds, so cuda-sandbox-hook would never run and no build would get a GPU.
          Set nix.settings.sandbox = true (or "relaxed").
        '';
      }
      {
        assertion = missingFeatures == [ ];
        message = ''
          programs.cuda-sandbox: nix.settings.system-features lacks ${lib.concatStringsSep ", " missingFeatures},
          so the daemon would refuse every derivation requiring them. Your own definition of
          nix.settings.system-features replaces the module's; add
          config.programs.cuda-sandbox.features to it.
        '';
      }
      {
        assertion = !(config.programs.nix-required-mounts.enable or false);
        message = ''
          programs.cuda-sandbox and programs.nix-required-mounts both want
          nix.settings.pre-build-hook, and Nix runs only one. Disable
          programs.nix-required-mounts.
        '';
      }
    ];

    warnings =
      lib.optional
        (cfg.driver.required && cfg.driver.link == "/run/opengl-driver" && !config.hardware.graphics.enable)
        ''
          programs.cuda-sandbox: hardware.graphics.enable is false, so /run/opengl-driver (the
          driver) may not exist and tagged builds will fail. Enable hardware.graphics with the
          NVIDIA driver (hardware.nvidia), or set programs.cuda-sandbox.driver.link.
        '';
  };
}
