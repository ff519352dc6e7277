# What the evaluation tests put in place of NixOS and Nixpkgs, which this machine does not
# have. Everything here is a STUB, written for these tests from the facts of the real files
# (read in NixOS/nixpkgs; no code copied), kept as small and as faithful as the tests need:
#
# - `pkgs`: strings where the module only interpolates a package, `addDriverRunpath.driverLink`,
#   `cudaPackages.cuda_compat` (unavailable, as under a default Nixpkgs config: it is broken
#   without `config.cudaSupport`), and `formats.toml` with the real type but a pure-Nix
#   `generate` (./toml.nix) instead of remarshal, which would need a build.
# - `module`: the NixOS options the module reads or sets, declared the way NixOS declares them:
#   - nixos/modules/services/system/nix-daemon.nix: `nix.enable`, a bool defaulting to true;
#   - nixos/modules/config/nix.nix: `nix.settings`, a submodule with a free-form type of Nix
#     config atoms (so `extra-system-features` is free-form: NixOS does not declare it),
#     `sandbox` (bool or "relaxed", default true), `system-features` (a list of strings)
#     declared WITHOUT a
#     default; and, only under `mkIf config.nix.enable`, the `mkDefault` definition of Nix's
#     default features and /etc/nix/nix.conf rendered from the settings (`key = value`, lists
#     space-separated, booleans true/false). That definition and its priority decide how the
#     module must add its features;
#   - nixos/modules/hardware/video/nvidia.nix: `hardware.nvidia.enabled`, read-only, true when
#     "nvidia" is in `services.xserver.videoDrivers` or `hardware.nvidia.datacenter.enable`;
#     `hardware.nvidia.open` (null or a bool, default null), which must be set when the
#     driver is enabled (its assertion, for drivers 560 and newer);
#   - modules/generic/meta-maintainers.nix (imported by nixos/modules/misc/meta.nix):
#     `meta.maintainers`, whose every entry must be one of `lib.maintainers` (the stand-in
#     list `maintainers` below: the lib checkout here has no maintainer-list.nix) and whose
#     value is `{ <file> = [ … ]; }`, by the file that defined it;
#   - nixos/modules/config/nix-remote-build.nix: `nix.buildMachines` (its entries' typed
#     options) and `nix.distributedBuilds`;
#   - `nix.extraOptions` (lines appended to nix.conf after the settings),
#     `boot.extraModprobeConfig` and `services.udev.extraRules` (lines);
#   - nixos/modules/services/hardware/nvidia-container-toolkit/default.nix:
#     `hardware.nvidia-container-toolkit.enable`, a bool defaulting to false, in a module of
#     its own (`toolkitModule`), so that cases can evaluate with and without the option;
#   - `environment.systemPackages` (list of packages), `environment.etc.<name>.source`,
#     `systemd.services` (loosely typed), `hardware.graphics.enable`, `assertions`, `warnings`.
# - `nspawnProfile`: nixos/modules/virtualisation/nspawn-container (the profile of a NixOS test's
#   containers): `system.name`, and `system.build` as nixos/modules/system/activation/top-level.nix
#   declares it (a submodule whose free-form attributes are `lazyAttrsOf (uniq unspecified)`), with
#   the profile's `system.build.nspawn`, a package whose `bin/run-<name>-nspawn` passes its
#   arguments on to systemd-nspawn.
# - `runNixOSTest`: pkgs.testers.runNixOSTest as nixos/lib/testing/ shapes it, for what the GPU
#   test helper uses: the options `name`, `containers` (each a NixOS configuration with the
#   profile, `system.name` its attribute name), `testScript` (a string or a function of
#   `{ nodes }`, as testScript.nix) and `testScriptString`; the result is the test derivation's
#   arguments (`rawTestDerivationArg` of run.nix, as `drvAttrs`: name, requiredSystemFeatures
#   [ "nixos-test" "kvm" ], buildCommand ending in `nixos-test-driver -o $out`), with `config`,
#   `extend { modules }` and `overrideTestDerivation` (`f` of the old arguments, merged over them,
#   as run.nix's `lib.extends (lib.toExtension f)`).
{
  lib,
  # How a text file becomes a "package": by default a fake store path that is never built
  # (evaluation tests); ./stub-nixpkgs.nix passes a real one, for builds in the sandbox.
  writeText ? null,
}:
let
  toTOML = import ./toml.nix { inherit lib; };

  # A syntactically valid store path; nothing is built or read.
  storePath = name: "${builtins.storeDir}/00000000000000000000000000000000-${name}";
  fakePackage = name: {
    type = "derivation";
    inherit name;
    outPath = storePath name;
  };
  textFile =
    name: text:
    (if writeText == null then fakePackage name else writeText name text) // { inherit text; };

  # A stand-in for `lib.maintainers` (maintainers/maintainer-list.nix), which the lib checkout
  # lacks; NixOS's check is membership of its values.
  maintainers = {
    alice = {
      name = "Alice";
      github = "alice";
      githubId = 1;
    };
  };
  maintainer = lib.mkOptionType {
    name = "maintainer";
    check = m: lib.elem m (lib.attrValues maintainers);
    merge =
      loc: defs:
      lib.listToAttrs (lib.singleton (lib.nameValuePair (lib.last defs).file (lib.last defs).value));
  };
  # By file: each definition's entries merged one by one, then zipped by file name. The newest
  # file validates every entry (its test injects a maintainer "so it passes the addCheck
  # validation"): an entry outside lib.maintainers is an error, which this stand-in raises.
  maintainersType = lib.types.addCheck (lib.types.listOf maintainer) (lib.all maintainer.check) // {
    merge =
      loc: defs:
      lib.zipAttrs (
        lib.flatten (
          lib.imap1 (
            n: def:
            lib.imap1 (
              m: entry:
              maintainer.merge (loc ++ [ "[${toString n}-${toString m}]" ]) [
                {
                  inherit (def) file;
                  value = entry;
                }
              ]
            ) def.value
          ) defs
        )
      );
  };
in
rec {
  inherit fakePackage textFile maintainers;

  toolkitModule = {
    options.hardware.nvidia-container-toolkit.enable = lib.mkOption {
      type = lib.types.bool;
      default = false;
    };
  };

  pkgs = {
    cuda-sandbox = fakePackage "cuda-sandbox-0.1.0" // {
      meta.mainProgram = "cuda-sandbox-hook";
    };
    addDriverRunpath.driverLink = "/run/opengl-driver";
    # Under a default config cuda_compat is marked broken (and it is unfree): not available.
    cudaPackages.cuda_compat = fakePackage "cuda_compat-12.9" // {
      meta.available = false;
    };
    kmod = fakePackage "kmod";
    runtimeShell = "/bin/sh";
    writeShellScript = name: text: textFile name "#!/bin/sh\n${text}";
    # As trivial-builders: a package whose bin/<name> is the script (here only its text).
    writeShellScriptBin = name: text: textFile name "#!/bin/sh\n${text}";
    util-linux = fakePackage "util-linux";
    coreutils = fakePackage "coreutils";
    gnugrep = fakePackage "gnugrep";

    formats.toml =
      { }:
      {
        type =
          with lib.types;
          let
            valueType =
              oneOf [
                bool
                int
                float
                str
                path
                (attrsOf valueType)
                (listOf valueType)
              ]
              // {
                description = "TOML value";
              };
          in
          valueType;

        # The real generate serialises `builtins.toJSON value`; go through JSON the same way so
        # that anything JSON cannot carry fails here too.
        generate =
          name: value:
          let
            plain = builtins.fromJSON (builtins.toJSON value);
          in
          textFile name (toTOML plain) // { value = plain; };
      };
  };

  module =
    { config, ... }:
    let
      loose = lib.types.attrsOf lib.types.anything;

      # nix.nix renders each setting as `key = value`: lists space-separated, booleans as
      # true/false, null as nothing, packages and paths as their store path.
      confValue =
        v:
        if v == null then
          ""
        else if builtins.isBool v then
          lib.boolToString v
        else if builtins.isList v then
          lib.concatMapStringsSep " " confValue v
        else
          toString v;
      nixConf =
        lib.concatStrings (lib.mapAttrsToList (k: v: "${k} = ${confValue v}\n") config.nix.settings)
        + config.nix.extraOptions;
    in
    {
      options = {
        assertions = lib.mkOption {
          type = lib.types.listOf lib.types.unspecified;
          default = [ ];
        };
        warnings = lib.mkOption {
          type = lib.types.listOf lib.types.str;
          default = [ ];
        };
        meta.maintainers = lib.mkOption {
          type = maintainersType;
          default = [ ];
        };
        nix.extraOptions = lib.mkOption {
          type = lib.types.lines;
          default = "";
        };
        boot.extraModprobeConfig = lib.mkOption {
          type = lib.types.lines;
          default = "";
        };
        services.udev.extraRules = lib.mkOption {
          type = lib.types.lines;
          default = "";
        };

        nix.enable = lib.mkOption {
          type = lib.types.bool;
          default = true;
        };

        # As nixos/modules/config/nix-remote-build.nix: a list of machines, each a submodule
        # (hostName, system, protocol ssh or ssh-ng, maxJobs, speedFactor, the two feature
        # lists, sshUser, sshKey), and distributedBuilds.
        nix.distributedBuilds = lib.mkOption {
          type = lib.types.bool;
          default = false;
        };
        nix.buildMachines = lib.mkOption {
          default = [ ];
          type = lib.types.listOf (
            lib.types.submodule {
              options = {
                hostName = lib.mkOption { type = lib.types.str; };
                system = lib.mkOption {
                  type = lib.types.nullOr lib.types.str;
                  default = null;
                };
                protocol = lib.mkOption {
                  type = lib.types.enum [
                    null
                    "ssh"
                    "ssh-ng"
                  ];
                  default = "ssh";
                };
                maxJobs = lib.mkOption {
                  type = lib.types.int;
                  default = 1;
                };
                speedFactor = lib.mkOption {
                  type = lib.types.int;
                  default = 1;
                };
                supportedFeatures = lib.mkOption {
                  type = lib.types.listOf lib.types.str;
                  default = [ ];
                };
                mandatoryFeatures = lib.mkOption {
                  type = lib.types.listOf lib.types.str;
                  default = [ ];
                };
                sshUser = lib.mkOption {
                  type = lib.types.nullOr lib.types.str;
                  default = null;
                };
                sshKey = lib.mkOption {
                  type = lib.types.nullOr lib.types.str;
                  default = null;
                };
              };
            }
          );
        };

        nix.settings = lib.mkOption {
          default = { };
          type = lib.types.submodule {
            freeformType =
              with lib.types;
              let
                confAtom = nullOr (oneOf [
                  bool
                  int
                  float
                  str
                  path
                  package
                ]);
              in
              attrsOf (either confAtom (listOf confAtom));
            options = {
              sandbox = lib.mkOption {
                type = lib.types.either lib.types.bool (lib.types.enum [ "relaxed" ]);
                default = true;
              };
              system-features = lib.mkOption { type = lib.types.listOf lib.types.str; };
            };
          };
        };

        environment.etc = lib.mkOption {
          type = lib.types.attrsOf (
            lib.types.submodule {
              options.source = lib.mkOption { type = lib.types.path; };
            }
          );
          default = { };
        };
        environment.systemPackages = lib.mkOption {
          type = lib.types.listOf lib.types.package;
          default = [ ];
        };

        systemd.services = lib.mkOption {
          type = lib.types.attrsOf loose;
          default = { };
        };

        hardware.graphics.enable = lib.mkOption {
          type = lib.types.bool;
          default = false;
        };
        services.xserver.videoDrivers = lib.mkOption {
          type = lib.types.listOf lib.types.str;
          default = [ ];
        };
        hardware.nvidia.datacenter.enable = lib.mkOption {
          type = lib.types.bool;
          default = false;
        };
        hardware.nvidia.open = lib.mkOption {
          type = lib.types.nullOr lib.types.bool;
          default = null;
        };
        hardware.nvidia.enabled = lib.mkOption {
          type = lib.types.bool;
          readOnly = true;
          default =
            lib.elem "nvidia" config.services.xserver.videoDrivers || config.hardware.nvidia.datacenter.enable;
        };
      };

      config = lib.mkMerge [
        # As nixos/modules/hardware/video/nvidia.nix.
        {
          assertions = [
            {
              assertion = !config.hardware.nvidia.enabled || config.hardware.nvidia.open != null;
              message = "You must configure `hardware.nvidia.open` on NVIDIA driver versions >= 560.";
            }
          ];
        }
        # As nixos/modules/config/nix.nix (without the gccarch-* features of a gcc.arch platform).
        (lib.mkIf config.nix.enable {
          nix.settings.system-features = lib.mkDefault [
            "nixos-test"
            "benchmark"
            "big-parallel"
            "kvm"
          ];
          environment.etc."nix/nix.conf".source = textFile "nix.conf" nixConf;
        })
      ];
    };

  nspawnProfile =
    { config, ... }:
    {
      options.system.name = lib.mkOption { type = lib.types.str; };
      options.system.build = lib.mkOption {
        default = { };
        type = lib.types.submoduleWith {
          modules = [ { freeformType = with lib.types; lazyAttrsOf (uniq unspecified); } ];
        };
      };
      # Named apart from the wrapper, so that the tests can tell which one a script runs.
      config.system.build.nspawn = fakePackage "nspawn-profile-${config.system.name}";
    };

  runNixOSTest =
    test:
    let
      framework =
        { config, ... }:
        {
          options = {
            name = lib.mkOption { type = lib.types.str; };
            containers = lib.mkOption {
              default = { };
              type = lib.types.lazyAttrsOf (
                lib.types.submoduleWith {
                  modules = [
                    module
                    nspawnProfile
                    ({ name, ... }: { system.name = name; })
                  ];
                  specialArgs.pkgs = pkgs;
                }
              );
            };
            testScript = lib.mkOption {
              type = with lib.types; either str (functionTo str);
            };
            testScriptString = lib.mkOption {
              type = lib.types.str;
              readOnly = true;
            };
          };
          config.testScriptString =
            if lib.isFunction config.testScript then
              config.testScript { nodes = config.containers; }
            else
              config.testScript;
        };
      # `overrides`: the functions given to overrideTestDerivation, oldest first.
      result = evaluated: overrides: {
        inherit (evaluated) config;
        drvAttrs = lib.foldl (old: f: old // f old) (attrs evaluated) overrides;
        extend = { modules }: result (evaluated.extendModules { inherit modules; }) overrides;
        overrideTestDerivation = f: result evaluated (overrides ++ [ f ]);
      };
      attrs = evaluated: {
        name = "vm-test-run-${evaluated.config.name}";
        requiredSystemFeatures = [
          "nixos-test"
          "kvm"
        ];
        buildCommand = ''
          mkdir -p $out
          export LOGFILE=/dev/null
          nixos-test-driver -o $out
        '';
      };
    in
    result (lib.evalModules {
      modules = [
        framework
        test
      ];
    }) [ ];
}
