# programs.nix-required-mounts' options, under programs.cuda-sandbox: a configuration written for
# Nixpkgs' nix-required-mounts (nixos/modules/programs/nix-required-mounts.nix) switches by
# renaming its prefix. Each `allowedPatterns.<name>` becomes a `[[rule]]` of the hook's
# configuration; `presets.nvidia-gpu.enable` is the module's own rule `nvidia`, and, as the
# preset there is the pattern `nvidia-gpu`, `allowedPatterns.nvidia-gpu` extends that rule: its
# onFeatures join the rule's features (and Nix's system features), its paths the rule's.
#
# The option shape is nix-required-mounts' (names, types, defaults); the translation:
#   onFeatures                 → the rule's `features` (and Nix's system-features)
#   paths: a path or package   → [[rule.path]], required (nix-required-mounts fails the build
#                                when a path is missing); a store path brings its closure
#   paths: a glob under /dev   → [[rule.device]], required (it must match, as there)
#   paths: { host; guest; }    → [[rule.mount]] inside = guest, outside = host, required
#   unsafeFollowSymlinks       → follow_entry_symlinks on its paths and mounts: the targets of
#                                the symlinks directly inside an exposed directory are exposed
#                                too (the hook always follows a symlink it exposes and every
#                                symlinked directory on the way), within symlink_roots
#   safePrefixes               → accepted, no effect: the hook never searches a symlink
#                                target further (one level of a directory's entries, and a
#                                store path's closure), which is what the default
#                                [ builtins.storeDir ] gives there for the store
#   presets.zluda.enable       → the module's rule `amd` (../hook/amd-rule.toml), which
#                                `allowedPatterns.zluda` extends as `nvidia-gpu` extends `nvidia`
#   extraWrapperArgs           → accepted and ignored, with a warning
{
  config,
  lib,
  options,
  ...
}:
let
  cfg = config.programs.cuda-sandbox;

  # As nix-required-mounts declares them.
  mountType = lib.types.submodule {
    options.host = lib.mkOption {
      type = lib.types.str;
      description = "Host path to mount.";
    };
    options.guest = lib.mkOption {
      type = lib.types.str;
      description = "Where the build sees it.";
    };
  };
  patternType = lib.types.submodule (
    { name, ... }:
    {
      options.onFeatures = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ name ];
        defaultText = lib.literalExpression "[ <name> ]";
        description = "The `requiredSystemFeatures` that get these paths.";
      };
      options.paths = lib.mkOption {
        type = lib.types.listOf (
          lib.types.oneOf [
            lib.types.path
            mountType
          ]
        );
        description = ''
          Paths exposed to the builds (each must exist, or the build fails): absolute paths
          and packages at the same place inside, globs of device nodes under `/dev`, and
          `{ host; guest; }` mounts of a host path at another place.
        '';
      };
      options.safePrefixes = lib.mkOption {
        type = lib.types.listOf lib.types.path;
        default = [ builtins.storeDir ];
        defaultText = lib.literalExpression "[ builtins.storeDir ]";
        description = ''
          As nix-required-mounts' option: prefixes under which symlink targets are not
          searched further for more symlinks. Accepted, and without effect here:
          cuda-sandbox-hook never searches a target further (with `unsafeFollowSymlinks` it
          looks at the entries directly inside an exposed directory, one level), and a store
          path brings its closure, which holds every store path it links to.
        '';
      };
      options.unsafeFollowSymlinks = lib.mkEnableOption ''
        following symlinks, as nix-required-mounts' option does: the targets of the symlinks
        directly inside an exposed directory are exposed too (`follow_entry_symlinks` of the
        pattern's paths and mounts). cuda-sandbox-hook always exposes the target of a symlink
        it exposes and of every symlinked directory on the way; all of them only where
        `settings.symlink_roots` allows (`/dev`, `/run`, `/usr`, `/lib`, `/lib64`, `/opt` and
        the store by default)'';
    }
  );

  patterns = import ./patterns.nix { inherit lib; };

  # With the preset, `allowedPatterns.nvidia-gpu` is the rule `nvidia` (./default.nix), as the
  # preset is that pattern in nix-required-mounts; every other pattern is a rule of its own.
  # The same for `presets.zluda` and the rule `amd`.
  ownRules = removeAttrs cfg.allowedPatterns (
    lib.optional cfg.presets.nvidia-gpu.enable "nvidia-gpu"
    ++ lib.optional cfg.presets.zluda.enable "zluda"
  );

  # The built-in rule for AMD GPUs, read from the file the hook's tests use.
  amdRule = lib.head (lib.importTOML ../hook/amd-rule.toml).rule;

  # Globs the hook cannot take: it globs device nodes and directories under the host root.
  globsOutsideDev = lib.concatLists (
    lib.mapAttrsToList (
      name: pattern:
      map (path: "allowedPatterns.${name}: ${path}") (
        lib.filter (s: patterns.isGlob s && !(lib.hasPrefix "/dev/" s)) (
          map patterns.entryName (lib.filter lib.isStringLike pattern.paths)
        )
      )
    ) cfg.allowedPatterns
  );
in
{
  options.programs.cuda-sandbox = {
    presets.nvidia-gpu.enable = lib.mkOption {
      type = lib.types.bool;
      default = true;
      description = ''
        The rule `nvidia` that {option}`programs.cuda-sandbox.features`, `driver`, `compat`,
        `extraDevices` and `extraPaths` describe: the NVIDIA device nodes and the driver for
        derivations that require one of those features. As nix-required-mounts' preset is
        its pattern `nvidia-gpu`, this one defines
        {option}`programs.cuda-sandbox.allowedPatterns.nvidia-gpu` (`onFeatures` from
        `features`, no `paths`, `unsafeFollowSymlinks = true` as Nixpkgs' preset has it): a
        definition of its `onFeatures` or `paths` extends the rule `nvidia` as it extends the
        preset there. On by default (programs.nix-required-mounts has it off: a
        configuration of that module without the preset sets it to false here). Off: only
        {option}`programs.cuda-sandbox.allowedPatterns` and `settings.rule` apply.
      '';
    };

    presets.zluda.enable = lib.mkEnableOption ''
      the rule `amd` (the hook's {file}`amd-rule.toml`): AMD GPUs for derivations that require
      one of `${lib.concatStringsSep " " amdRule.features}`, as nix-required-mounts' preset
      `zluda` gives them (CUDA programs run on AMD GPUs through ZLUDA's `libcuda`). It
      exposes `/dev/kfd`, the DRM nodes (`/dev/dri/card*`, `/dev/dri/renderD*`), the driver
      link with its store closure (where {option}`hardware.amdgpu.zluda.enable` puts ZLUDA),
      and, read-only, `/sys/devices/virtual/kfd` and the PCI devices of the DRM nodes
      (`sysfs = "kfd"`). As there, it sets {option}`hardware.amdgpu.zluda.enable` and
      {option}`hardware.graphics.enable` (both `mkDefault`), and defines
      {option}`programs.cuda-sandbox.allowedPatterns.zluda`, whose `onFeatures` and `paths`
      extend the rule. With the NVIDIA rule too, a `cuda` build gets both vendors' GPUs
      (docs/configuration.md). Not with GPU leases (`settings.gpus_per_build`): the hook cannot
      confine a build to one AMD GPU yet'';

    allowedPatterns = lib.mkOption {
      type = lib.types.attrsOf patternType;
      default = { };
      example = {
        require-ipfs.paths = [ "/ipfs" ];
        require-ipfs.onFeatures = [ "ipfs" ];
      };
      description = ''
        programs.nix-required-mounts' patterns: for each, the paths exposed to the builds that
        require one of its `onFeatures`. Each becomes a rule of the hook's configuration,
        named after it, after the rule `nvidia`; with
        {option}`programs.cuda-sandbox.presets.nvidia-gpu.enable`, `nvidia-gpu` is the rule
        `nvidia` itself. A pattern with no paths would expose nothing, and is refused.
      '';
    };

    extraWrapperArgs = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      description = ''
        Accepted for programs.nix-required-mounts' configurations and ignored: cuda-sandbox-hook
        has no wrapper. `cuda-sandbox-hook explain` shows what a build would get, and why.
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    # The preset defines the pattern `nvidia-gpu`, as nix-required-mounts' does, at normal
    # priority: a user's `onFeatures` and `paths` join these (lists concatenate), `lib.mkForce`
    # replaces them, and a different `unsafeFollowSymlinks` is a conflicting definition, as
    # there (Nixpkgs' preset defines `true` since NixOS/nixpkgs#488199, `false` before).
    programs.cuda-sandbox.allowedPatterns = lib.mkMerge [
      (lib.mkIf cfg.presets.nvidia-gpu.enable {
        nvidia-gpu = {
          onFeatures = cfg.features;
          paths = [ ];
          unsafeFollowSymlinks = true;
        };
      })
      # As Nixpkgs' preset `zluda` (NixOS/nixpkgs#501095, #518786): its features, symlinks
      # followed; its paths are the rule `amd`'s own.
      (lib.mkIf cfg.presets.zluda.enable {
        zluda = {
          onFeatures = amdRule.features;
          paths = [ ];
          unsafeFollowSymlinks = true;
        };
      })
    ];
    # Both presets turn the graphics stack on, as Nixpkgs' do (the NVIDIA one since
    # NixOS/nixpkgs#488199): the driver link is its output.
    hardware = lib.mkMerge [
      {
        graphics.enable = lib.mkIf (cfg.presets.nvidia-gpu.enable || cfg.presets.zluda.enable) (
          lib.mkDefault true
        );
      }
      # ZLUDA in the driver link (NixOS's amdgpu module adds it to hardware.graphics), where
      # that option exists (it is newer than this module's oldest NixOS).
      (lib.optionalAttrs (options ? hardware.amdgpu.zluda.enable) {
        amdgpu.zluda.enable = lib.mkIf cfg.presets.zluda.enable (lib.mkDefault true);
      })
    ];
    programs.cuda-sandbox.settings.rule = lib.mapAttrsToList patterns.translate ownRules;

    assertions = [
      {
        assertion = globsOutsideDev == [ ];
        message = ''
          programs.cuda-sandbox: ${lib.concatStringsSep ", " globsOutsideDev}: a glob outside
          /dev. cuda-sandbox-hook globs device nodes (and directories) under /dev only; list
          the paths themselves, or the directory that holds them.
        '';
      }
      {
        assertion = !(cfg.presets.zluda.enable && cfg.allowedPatterns ? amd);
        message = ''
          programs.cuda-sandbox.allowedPatterns.amd: the name of the module's rule for AMD GPUs
          (presets.zluda.enable). Rename the pattern, or extend the rule with
          programs.cuda-sandbox.allowedPatterns.zluda.
        '';
      }
      {
        assertion = !(cfg.presets.zluda.enable && cfg.settings.gpus_per_build > 0);
        message = ''
          programs.cuda-sandbox: presets.zluda.enable with settings.gpus_per_build =
          ${toString cfg.settings.gpus_per_build}: GPU leases cannot confine a build to its AMD
          GPUs yet (KFD gives a process every GPU of its topology that the device cgroup
          allows, and a Nix sandbox sets none), so cuda-sandbox-hook refuses the rule amd
          under leases. Set settings.gpus_per_build = 0, or disable presets.zluda.
        '';
      }
      {
        assertion = !(cfg.presets.nvidia-gpu.enable && cfg.allowedPatterns ? nvidia);
        message = ''
          programs.cuda-sandbox.allowedPatterns.nvidia: the name of the module's own rule
          (presets.nvidia-gpu.enable). Rename the pattern, or extend the rule with
          programs.cuda-sandbox.extraPaths and extraDevices.
        '';
      }
    ];

    warnings = lib.optional (cfg.extraWrapperArgs != [ ]) ''
      programs.cuda-sandbox.extraWrapperArgs is ignored (cuda-sandbox-hook has no wrapper):
      ${lib.concatStringsSep " " cfg.extraWrapperArgs}. `cuda-sandbox-hook explain` shows what a
      build gets, and why.
    '';
  };
}
