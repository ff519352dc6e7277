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
#   extraWrapperArgs           → accepted and ignored, with a warning
{
  config,
  lib,
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
  ownRules =
    if cfg.presets.nvidia-gpu.enable then
      removeAttrs cfg.allowedPatterns [ "nvidia-gpu" ]
    else
      cfg.allowedPatterns;

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
    programs.cuda-sandbox.allowedPatterns = lib.mkIf cfg.presets.nvidia-gpu.enable {
      nvidia-gpu = {
        onFeatures = cfg.features;
        paths = [ ];
        unsafeFollowSymlinks = true;
      };
    };
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
