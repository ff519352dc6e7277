# programs.cuda-sandbox: the cuda-sandbox-hook as the Nix daemon's pre-build-hook, so that
# derivations tagged `requiredSystemFeatures = [ "cuda" ]` see the NVIDIA GPU and the driver in
# the sandbox, and every other derivation sees nothing.
#
# The flake's `nixosModules.default` is this file. Its default package is ../package.nix built
# with the system's `pkgs` (or `pkgs.cuda-sandbox`, with the flake's overlay), so it works the
# same without flakes: `imports = [ ./cuda-sandbox/nixos-module ];`.
#
# Needs NixOS 24.11 or later (`hardware.graphics`, which replaced `hardware.opengl` in 24.11).
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

  # The hook's built-in rule (the NVIDIA device nodes, the driver at the NixOS link), read
  # from the very file the hook embeds, so the two cannot drift apart. The options below extend
  # it: they set its features and driver, and add devices and paths.
  builtinRule = lib.head (lib.importTOML ../hook/default-config.toml).rule;

  # The built-in devices, with a NixOS-specific fix on the node that appears only lazily.
  defaultDevices = map (
    device:
    device
    // lib.optionalAttrs (device.glob == "/dev/nvidia-uvm") {
      hint =
        "the node is created lazily: run `nvidia-modprobe -u -c=0` "
        + "(programs.cuda-sandbox.createUvmNode does it at boot)";
    }
  ) builtinRule.device;

  # nixpkgs binaries carry `${cuda_compat}/compat` in DT_RUNPATH; the hook wants that directory.
  compatDir = entry: if lib.isDerivation entry then "${entry}/compat" else entry;

  # With the preset, `allowedPatterns.nvidia-gpu` (./required-mounts.nix defines it from
  # `features`) as entries of the rule: nix-required-mounts' preset is that pattern, so what a
  # user adds to it extends this rule, as it extends the preset there.
  preset =
    (import ./patterns.nix { inherit lib; }).translate builtinRule.name
      cfg.allowedPatterns.nvidia-gpu;

  # With presets.zluda (./required-mounts.nix): the hook's rule for AMD GPUs, extended by
  # `allowedPatterns.zluda` as the rule nvidia is by `allowedPatterns.nvidia-gpu`.
  amdBuiltin = lib.head (lib.importTOML ../hook/amd-rule.toml).rule;
  amdRule =
    let
      extra =
        (import ./patterns.nix { inherit lib; }).translate amdBuiltin.name
          cfg.allowedPatterns.zluda;
    in
    amdBuiltin
    // {
      features = lib.unique extra.features;
      device = amdBuiltin.device ++ extra.device or [ ];
      path = amdBuiltin.path ++ extra.path or [ ];
    }
    // lib.optionalAttrs (extra ? mount) { inherit (extra) mount; };

  # With programs.cuda-sandbox.cdi.enable (./cdi.nix): the devices of NixOS's CDI spec in
  # place of the built-in globs and MIG source; Jetson's globs stay (its spec has no nodes).
  cdiRule = {
    cdi = map (device: "nvidia.com/gpu=${device}") cfg.cdi.devices;
    cdi_hint =
      "start the unit that writes /run/cdi/nvidia-container-toolkit.json: "
      + "systemctl start nvidia-container-toolkit-cdi-generator.service "
      + "(journalctl -u nvidia-container-toolkit-cdi-generator says why it did not run; "
      + "it needs hardware.nvidia-container-toolkit.enable)";
  };
  ownDevices =
    if cfg.cdi.enable then
      lib.filter (device: (device.platform or null) == "tegra") builtinRule.device
    else
      defaultDevices;

  # The rule the options describe; `settings.rule` definitions are appended to it.
  rule =
    let
      paths = map dropNulls cfg.extraPaths ++ preset.path or [ ];
    in
    {
      inherit (builtinRule) name;
      # `features` and the pattern's own onFeatures, each once.
      features = lib.unique preset.features;
      device = map dropNulls (ownDevices ++ cfg.extraDevices) ++ preset.device or [ ];
      driver = builtinRule.driver // {
        inherit (cfg.driver) link required;
        # NixOS has no driver in the loader cache or /usr/lib: the link is the only source.
        host_libraries = false;
        compat = map compatDir (lib.filter usable cfg.compat);
      };
    }
    # `mig`: the MIG source, as built in (each instance's capability nodes; never config or
    # monitor); with CDI, the spec's MIG devices instead.
    // (if cfg.cdi.enable then cdiRule else { inherit (builtinRule) mig; })
    // lib.optionalAttrs (paths != [ ]) { path = paths; }
    // lib.optionalAttrs (preset ? mount) { inherit (preset) mount; }
    // lib.optionalAttrs (cfg.sysfs != null) { inherit (cfg) sysfs; };

  # What Nix will see as its system features. `nix.settings`' free-form type lets a setting be
  # a list or a string ("a b", as nix.conf writes it), so both are split on whitespace. Nix
  # reads nix.conf top to bottom and NixOS appends `nix.extraOptions` after the settings: there
  # a `system-features` line replaces what came before and `extra-system-features` adds to it.
  featureList =
    value:
    lib.concatMap (v: lib.filter (w: w != "") (lib.splitString " " (toString v))) (lib.toList value);
  extraLines = lib.filter (l: l != null) (
    map (builtins.match "[[:space:]]*((extra-)?system-features)[[:space:]]*=(.*)") (
      lib.splitString "\n" (lib.replaceStrings [ "\t" ] [ " " ] (config.nix.extraOptions or ""))
    )
  );
  declaredFeatures =
    lib.foldl'
      (
        features: line:
        if lib.elemAt line 0 == "system-features" then
          featureList (lib.elemAt line 2)
        else
          features ++ featureList (lib.elemAt line 2)
      )
      (
        featureList config.nix.settings.system-features
        ++ featureList (config.nix.settings.extra-system-features or [ ])
      )
      extraLines;
  # Every rule's features (the module's, the translated allowedPatterns, settings.rule): Nix
  # refuses a derivation requiring a feature it does not declare, so all of them must be there.
  ruleFeatures = lib.unique (lib.concatMap (r: r.features or [ ]) cfg.settings.rule);
  # ...and the GPUs' cuda-sm-* features (./fleet-features.nix), which clients schedule by.
  advertisedFeatures = ruleFeatures ++ cfg.cudaSystemFeatures;
  missingFeatures = lib.subtractLists declaredFeatures advertisedFeatures;

  # Rules that name nothing to expose, as the hook's `check-config` judges them: a tagged build
  # would be told it is tagged and get nothing.
  sources = [
    "device"
    "path"
    "mount"
    "driver"
    "cdi"
    "mig"
  ];
  emptyRules = map (r: r.name or "(unnamed)") (
    lib.filter (r: !lib.any (key: (r.${key} or [ ]) != [ ]) sources) cfg.settings.rule
  );

  # A package that cannot be built here (cuda_compat is unfree and broken unless
  # nixpkgs.config.cudaSupport is set): rendering its path would abort the evaluation, so it is
  # left out of the file and an assertion says what to set.
  usable = entry: !(lib.isDerivation entry) || (entry.meta.available or true);
  unusableCompat = lib.filter (entry: !(usable entry)) cfg.compat;

  # Nixpkgs' CUDA redistributables put `${cuda_compat}/compat` before the driver link in
  # DT_RUNPATH exactly when `cuda_compat.meta.available` (autoAddCudaCompatRunpath); the hook
  # should then consider the same compat driver that those binaries load.
  nixpkgsCompat =
    let
      compat = pkgs.cudaPackages.cuda_compat or null;
      available = builtins.tryEval (compat != null && (compat.meta.available or false));
    in
    lib.optional (available.success && available.value) compat;

  renderedFeatures = lib.concatStringsSep " " advertisedFeatures;

  # Run by udev when nvidia_uvm loads: the nodes `nvidia-modprobe -u -c=0` would make.
  uvmNodes = pkgs.writeShellScript "cuda-sandbox-nvidia-uvm-nodes" ''
    major=$(${pkgs.gnugrep}/bin/grep -m1 ' nvidia-uvm$' /proc/devices | ${pkgs.coreutils}/bin/cut -d ' ' -f 1)
    if [ -z "$major" ]; then
      echo "cuda-sandbox: nvidia_uvm is loaded but nvidia-uvm is not in /proc/devices" >&2
      exit 1
    fi
    [ -c /dev/nvidia-uvm ] || ${pkgs.coreutils}/bin/mknod -m 666 /dev/nvidia-uvm c "$major" 0
    [ -c /dev/nvidia-uvm-tools ] || ${pkgs.coreutils}/bin/mknod -m 666 /dev/nvidia-uvm-tools c "$major" 1
  '';

  # What `settings` knows; anything else is free-form and goes to the file as written.
  absolutePath = lib.types.strMatching "/.*";
  knownSettings = {
    missing_drv = lib.mkOption {
      type = lib.types.enum [
        "skip"
        "expose"
        "fail"
      ];
      default = "skip";
      description = ''
        What the hook does when the `.drv` of a build is not on disk and Nix passed the
        derivation no other way (a remote builder on upstream Nix, NixOS/nix#9272): `skip`
        exposes nothing, with a warning; `expose` gives the build every rule's devices, as if it
        were tagged; `fail` fails it. {option}`programs.cuda-sandbox.dedicatedBuilder` sets
        `expose`, which is right only on a builder that receives GPU builds alone.
      '';
    };
    gpus_per_build = lib.mkOption {
      type = lib.types.ints.unsigned;
      default = 0;
      description = ''
        GPUs leased to each tagged build for itself alone; `0`: every tagged build sees every
        GPU. A derivation may ask for another number with the attribute `cudaSandboxGpus`.
      '';
    };
    lease_wait_seconds = lib.mkOption {
      type = lib.types.ints.unsigned;
      default = 600;
      description = ''
        With `gpus_per_build`: how long a tagged build waits for enough free GPUs before it
        fails; `0` fails at once.
      '';
    };
    closure_cache = lib.mkOption {
      type = absolutePath;
      default = "/var/cache/cuda-sandbox/closures";
      description = "Directory of cached store-path closures (one file per store path).";
    };
    runtime_dir = lib.mkOption {
      type = absolutePath;
      default = "/run/cuda-sandbox";
      description = ''
        Per-build manifests (`manifests/`, bound read-only into each tagged build) and GPU leases
        (`leases/`).
      '';
    };
    rule = lib.mkOption {
      type = lib.types.listOf settingsFormat.type;
      default = [ ];
      description = ''
        `[[rule]]` tables: the rule `nvidia` that the options above describe comes first, then
        these. `lib.mkForce` replaces the list, the module's rule included.
      '';
    };
  };
in
{
  imports = [
    ./required-mounts.nix
    ./cdi.nix
    ./fleet-features.nix
    ./inventory.nix
  ];

  # No meta.maintainers here: NixOS accepts only entries of lib.maintainers there, and this
  # project is not (yet) in that list; the package's meta names its maintainers.

  options.programs.cuda-sandbox = {
    enable = lib.mkEnableOption ''
      cuda-sandbox: the NVIDIA GPU and the CUDA driver inside the Nix build sandbox, for
      derivations that require one of {option}`programs.cuda-sandbox.features`
    '';

    package = lib.mkOption {
      type = lib.types.package;
      default = pkgs.cuda-sandbox or (pkgs.callPackage ../package.nix { });
      defaultText = lib.literalExpression "pkgs.cuda-sandbox or (pkgs.callPackage ./cuda-sandbox/package.nix { })";
      description = ''
        The cuda-sandbox package. By default the flake's overlay's `pkgs.cuda-sandbox`, else
        the repository's {file}`package.nix` built with this system's Nixpkgs.
      '';
    };

    features = lib.mkOption {
      type = lib.types.listOf (lib.types.strMatching "[^[:space:]]+");
      default = builtinRule.features;
      example = lib.literalExpression ''[ "cuda-ada" ]'';
      description = ''
        The `requiredSystemFeatures` that get the GPU (the rule `nvidia`). The module defines
        the built-in ones, `${lib.concatStringsSep " " builtinRule.features}`, as a plain
        definition, so a definition of yours adds to them, as lists join in NixOS
        (`[ "cuda-ada" ]` and `lib.mkAfter [ "cuda-ada" ]` alike), and `lib.mkForce` replaces
        them. Adding, because replacing was silent: a list that left out `cuda` took the GPU
        from every derivation that asks for it the usual way, with nothing to say so.
        {option}`programs.cuda-sandbox.allowedPatterns.nvidia-gpu.onFeatures` adds the same
        way. All of them are added to {option}`nix.settings.system-features` (keeping Nix's
        defaults), so the daemon accepts such derivations at all.
      '';
    };

    driver = {
      link = lib.mkOption {
        type = lib.types.str;
        default = pkgs.addDriverRunpath.driverLink;
        defaultText = lib.literalExpression "pkgs.addDriverRunpath.driverLink";
        description = ''
          The driver link (`/run/opengl-driver`), exposed with its store closure. On NixOS
          {option}`hardware.graphics` makes it point at
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
      default = nixpkgsCompat;
      defaultText = lib.literalExpression ''
        lib.optional pkgs.cudaPackages.cuda_compat.meta.available pkgs.cudaPackages.cuda_compat
      '';
      example = lib.literalExpression ''[ "/usr/local/cuda-12.9/compat" ]'';
      description = ''
        `cuda_compat` drivers to consider: packages (their `compat/` directory is used) or
        absolute directory globs. The hook picks one only when its ELF note lists the host's
        kernel driver branch and its CUDA version is newer than the host driver's; otherwise
        `cuInit` would fail (803, or 804 on GPUs that cannot use compat: only data-centre GPUs
        and Jetson can).

        The default is what Nixpkgs' own CUDA binaries load: Nixpkgs puts
        `''${cuda_compat}/compat` before the driver link in their DT_RUNPATH exactly when
        `cudaPackages.cuda_compat.meta.available`. That needs `nixpkgs.config.cudaSupport = true`
        (without it the package is marked broken), its unfree licence allowed, and a platform
        NVIDIA ships it for: Jetson only (NVIDIA's manifest has it for linux-aarch64, as
        "CUDA compat L4T"; older Nixpkgs also requires a Jetson `cudaCapabilities`). Elsewhere
        the default is empty; a data-centre GPU's compat directory (NVIDIA's `cuda-compat`
        package) can be listed as a path, though Nixpkgs' binaries do not load it. A listed
        package that is not available fails an assertion saying so.
      '';
    };

    dedicatedBuilder = lib.mkEnableOption ''
      the settings of a dedicated GPU builder: a machine whose entry in the clients'
      {option}`nix.buildMachines` (or /etc/nix/machines) lists `cuda` among its
      `mandatoryFeatures`, so that it receives only GPU builds. On upstream Nix the hook of a
      remote builder is handed a `.drv` path that does not exist there (NixOS/nix#9272), so it
      cannot read the build's features. On a dedicated builder every build asked for the GPU,
      so this sets {option}`programs.cuda-sandbox.settings.missing_drv` to `expose` (at
      `mkDefault` priority). Do not set it on a builder that also takes other builds: they would
      get the GPU too'';

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
      example = [ "/opt/my-tools" ];
      description = ''
        Host paths exposed at the same place (symlinks and store closures followed, symlinks
        only into `settings.symlink_roots` and the store). Not `/etc/<name>`: on NixOS that is
        a link through `/etc/static`; give its store path
        (`config.environment.etc."<name>".source`) instead.
      '';
    };

    sysfs = lib.mkOption {
      type = lib.types.nullOr (lib.types.enum [ "topology" ]);
      default = null;
      example = "topology";
      description = ''
        What of the host's `/sys` the rule's builds see, read-only. `"topology"`:
        `/sys/devices/system/cpu` and `/sys/devices/system/node`, for hwloc, NVML's affinity
        calls and NCCL's NUMA placement; nothing else of `/sys` (no PCI devices yet). Untagged
        builds never see any of it. See `sysfs` in docs/configuration.md.
      '';
    };

    createUvmNode = lib.mkOption {
      type = lib.types.bool;
      default = !(config.hardware.nvidia.enabled or false);
      defaultText = lib.literalExpression "!config.hardware.nvidia.enabled";
      description = ''
        Load `nvidia-uvm` whenever `nvidia` loads (a modprobe softdep) and create
        `/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools` as soon as it is loaded (a udev rule),
        however late in boot that is. Without a module that does it, the node appears only on
        the first CUDA call outside a sandbox (the sandbox cannot create it), so a freshly
        booted builder fails its first CUDA builds.

        {option}`hardware.nvidia` already does it (it loads `nvidia-uvm` after `nvidia` and a
        udev rule makes `/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools` when the module loads), so
        the default is off where that module drives the GPU, on elsewhere (e.g. a driver from
        outside {option}`hardware.nvidia`).
      '';
    };

    settings = lib.mkOption {
      type = lib.types.submodule {
        freeformType = settingsFormat.type;
        options = knownSettings;
      };
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
        configuration reference in docs/configuration.md). The keys documented here are typed; any other
        key of the reference (e.g. `host_root`, `symlink_roots`) is passed through as written,
        and the hook rejects unknown ones. The options above define the rule `nvidia`; rules
        given here are added after it (`lib.mkForce` replaces it).
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    # A plain definition, so that the user's join it (see the option's description).
    programs.cuda-sandbox.features = builtinRule.features;
    # mkBefore: the module's rule comes first whatever the order of imports.
    programs.cuda-sandbox.settings.rule = lib.mkBefore (
      lib.optional cfg.presets.nvidia-gpu.enable rule ++ lib.optional cfg.presets.zluda.enable amdRule
    );
    # mkDefault beats the option's default and loses to the user's own definition.
    programs.cuda-sandbox.settings.missing_drv = lib.mkIf cfg.dedicatedBuilder (lib.mkDefault "expose");

    # `cuda-sandbox-hook explain`, `check-config` and `exec` for the administrator.
    environment.systemPackages = [ cfg.package ];

    environment.etc."cuda-sandbox/config.toml".source =
      settingsFormat.generate "cuda-sandbox.toml" cfg.settings;

    nix.settings = {
      pre-build-hook = lib.getExe cfg.package;
      # Nixpkgs sets its defaults (nixos-test, benchmark, big-parallel, kvm, gccarch-*) with
      # mkDefault. A plain definition would replace them (the bug of programs.nix-required-mounts);
      # mkOptionDefault would lose to them. At mkDefault priority the lists concatenate, and a
      # user's own plain definition still wins: the assertion below then names what is missing.
      system-features = lib.mkDefault ruleFeatures;
    };

    # /dev/nvidia-uvm, made when the module appears rather than at a moment in boot (a
    # driver that udev's coldplug loads late would miss a unit ordered after
    # systemd-modules-load). As hardware.nvidia does: the softdep loads nvidia-uvm right after
    # nvidia, whoever loads nvidia, and the udev rule makes the nodes once nvidia_uvm is in.
    # nvidia-uvm's major number is dynamic, so it is read from /proc/devices. Jetson has no
    # nvidia module, so neither ever fires there.
    boot.extraModprobeConfig = lib.mkIf cfg.createUvmNode ''
      softdep nvidia post: nvidia-uvm
    '';
    services.udev.extraRules = lib.mkIf cfg.createUvmNode ''
      ACTION=="add", KERNEL=="nvidia_uvm", RUN+="${uvmNodes}"
    '';

    assertions = [
      {
        assertion = config.nix.settings.sandbox != false;
        message = ''
          programs.cuda-sandbox: nix.settings.sandbox is false, so every build runs on the host
          itself and sees all of its devices and libraries, tagged or not, and Nix runs a
          pre-build-hook only for sandboxed builds, so cuda-sandbox-hook would never run. The
          module exists to give the GPU to the builds that ask for it and to no other. Set
          nix.settings.sandbox = true (or "relaxed").
        '';
      }
      {
        assertion = missingFeatures == [ ];
        message = ''
          programs.cuda-sandbox: neither nix.settings.system-features nor
          nix.settings.extra-system-features has ${lib.concatStringsSep ", " missingFeatures},
          so the daemon would refuse every derivation requiring them. Your own definition of
          nix.settings.system-features replaces the module's; add these features to it (or to
          nix.settings.extra-system-features).
        '';
      }
      {
        assertion = emptyRules == [ ];
        message = ''
          programs.cuda-sandbox: the rule ${lib.concatStringsSep ", " emptyRules} of
          /etc/cuda-sandbox/config.toml exposes nothing (no device, path, mount, driver, CDI
          device or MIG), so the builds that ask for its features would get nothing;
          cuda-sandbox-hook check-config refuses it. Give the pattern (allowedPatterns.<name>)
          or the rule (settings.rule) what its builds need, or remove it. With
          presets.nvidia-gpu.enable, allowedPatterns.nvidia-gpu extends the rule nvidia.
        '';
      }
      {
        assertion = unusableCompat == [ ];
        message = ''
          programs.cuda-sandbox.compat lists ${
            lib.concatMapStringsSep ", " (p: p.name or "a package") unusableCompat
          }, which is not available with this Nixpkgs configuration. cudaPackages.cuda_compat is
          unfree and marked broken unless nixpkgs.config.cudaSupport = true, and NVIDIA ships it
          for Jetson (linux-aarch64) only; older Nixpkgs also needs a Jetson
          nixpkgs.config.cudaCapabilities. Set those, or remove it from the list.
        '';
      }
      {
        assertion = !(config.programs.nix-required-mounts.enable or false);
        message = ''
          programs.cuda-sandbox and programs.nix-required-mounts both want
          nix.settings.pre-build-hook, and Nix runs only one. Disable
          programs.nix-required-mounts: its allowedPatterns, presets.nvidia-gpu.enable,
          presets.zluda.enable and extraWrapperArgs are accepted under programs.cuda-sandbox (README: "Coming from
          nix-required-mounts").
        '';
      }
    ];

    warnings =
      lib.optional (!config.nix.enable) ''
        programs.cuda-sandbox: nix.enable is false, so NixOS writes no nix.conf and neither the
        hook nor its features reach Nix. Add to the nix.conf of the Nix you manage:
          pre-build-hook = ${lib.getExe cfg.package}
          extra-system-features = ${renderedFeatures}
        (/etc/cuda-sandbox/config.toml is still written.)
      ''
      ++
        lib.optional
          (
            (
              cfg.presets.nvidia-gpu.enable && cfg.driver.required && cfg.driver.link == "/run/opengl-driver"
              || cfg.presets.zluda.enable
            )
            && !config.hardware.graphics.enable
          )
          ''
            programs.cuda-sandbox: hardware.graphics.enable is false (the presets turn it on with
            mkDefault; this configuration turned it off), so /run/opengl-driver (the driver) may
            not exist and tagged builds will fail. Enable hardware.graphics with the driver
            (hardware.nvidia; hardware.amdgpu.zluda with presets.zluda), or set
            programs.cuda-sandbox.driver.link.
          '';
  };
}
