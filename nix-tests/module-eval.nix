# Evaluation test of nixos-module/ (programs.cuda-sandbox) with the real Nixpkgs `lib` and the
# stubs of ./stubs.nix in place of NixOS and Nixpkgs.
#
#   nix-instantiate --eval --strict nix-tests/module-eval.nix --arg lib 'import /path/to/nixpkgs.lib/lib'
#
# Every check is an `assert`: a failure stops the evaluation with a message naming the case
# and what differed. The result holds the rendered config.toml of each case, which nix-tests/run
# writes to files and gives to `cuda-sandbox-hook check-config`: that proves the module renders
# what the hook accepts.
{ lib }:
let
  stubs = import ./stubs.nix { inherit lib; };

  eval =
    config:
    lib.evalModules {
      modules = [
        stubs.module
        ../nixos-module
        config
      ];
      specialArgs.pkgs = stubs.pkgs;
    };

  # The configuration as the system would see it, with the failing assertions and warnings.
  system =
    config:
    let
      c = (eval config).config;
      etc = c.environment.etc."cuda-sandbox/config.toml".source;
    in
    {
      inherit (c.nix.settings) system-features;
      hook = c.nix.settings.pre-build-hook or null;
      toml = etc.text;
      settings = etc.value;
      nvidia = lib.head etc.value.rule;
      failed = map (a: a.message) (lib.filter (a: !a.assertion) c.assertions);
      inherit (c) warnings;
      uvm = c.systemd.services.cuda-sandbox-nvidia-uvm or null;
    };

  check =
    case: condition: what:
    lib.assertMsg condition "module-eval: case '${case}': ${what}";

  checkEqual =
    case: what: actual: expected:
    check case (actual == expected) ''
      ${what}:
        expected ${lib.generators.toPretty { } expected}
        got      ${lib.generators.toPretty { } actual}'';

  enabled = {
    programs.cuda-sandbox.enable = true;
    hardware.graphics.enable = true;
  };

  nixDefaults = [
    "nixos-test"
    "benchmark"
    "big-parallel"
    "kvm"
  ];
  cudaFeatures = [
    "cuda"
    "gpu"
    "nvidia-gpu"
    "opengl"
  ];

  # --- the cases -----------------------------------------------------------------------------

  defaults = system enabled;

  withCompat = system {
    imports = [ enabled ];
    programs.cuda-sandbox.compat = [
      {
        type = "derivation";
        name = "cuda_compat-12.9";
        outPath = "${builtins.storeDir}/11111111111111111111111111111111-cuda_compat-12.9";
      }
      "/usr/local/cuda-12.9/compat"
    ];
  };

  withDevices = system {
    imports = [ enabled ];
    programs.cuda-sandbox = {
      features = [ "cuda" ];
      extraDevices = [
        "/dev/infiniband/uverbs*"
        {
          glob = "/dev/nvidia-fs*";
          required = true;
          hint = "load nvidia-fs";
        }
      ];
      extraPaths = [ "/etc/nvidia" ];
      # Freeform keys reach the file; a rule given here comes after the module's.
      settings = {
        closure_cache = "/var/cache/gpu-closures";
        missing_drv = "expose";
        rule = [
          {
            name = "rdma";
            features = [ "rdma" ];
            device = [ { glob = "/dev/infiniband/*"; } ];
          }
        ];
      };
    };
  };

  # A user's own plain definition replaces Nixpkgs' defaults and the module's features alike.
  userFeatures = system {
    imports = [ enabled ];
    nix.settings.system-features = [ "kvm" ];
  };

  sandboxOff = system {
    imports = [ enabled ];
    nix.settings.sandbox = false;
  };

  noGraphics = system { programs.cuda-sandbox.enable = true; };

  disabled = system { };

  # Negative controls: the two obvious ways to add features, and why the module uses neither.
  # A plain definition drops Nixpkgs' defaults (the bug of programs.nix-required-mounts)...
  plainDefinition = (eval { nix.settings.system-features = cudaFeatures; }).config.nix.settings;
  # ...and mkOptionDefault loses to Nixpkgs' mkDefault, so the features vanish.
  optionDefault =
    (eval { nix.settings.system-features = lib.mkOptionDefault cudaFeatures; }).config.nix.settings;

  expectedDevices = [
    {
      glob = "/dev/nvidiactl";
      required = true;
      platform = "discrete";
    }
    {
      glob = "/dev/nvidia-uvm";
      required = true;
      platform = "discrete";
      hint = "the node is created lazily: run `nvidia-modprobe -u -c=0` (programs.cuda-sandbox.createUvmNode does it at boot)";
    }
    {
      glob = "/dev/nvidia[0-9]*";
      required = true;
      platform = "discrete";
    }
    { glob = "/dev/nvidia-uvm-tools"; }
    { glob = "/dev/nvidia-modeset"; }
    { glob = "/dev/nvidia-caps/nvidia-cap*"; }
    { glob = "/dev/nvidia-caps-imex-channels/*"; }
    { glob = "/dev/dri/renderD*"; }
    { glob = "/dev/dri/card*"; }
    {
      glob = "/dev/nvmap";
      required = true;
      platform = "tegra";
    }
    {
      glob = "/dev/nvhost-*";
      platform = "tegra";
    }
    {
      glob = "/dev/nvgpu/igpu0/*";
      platform = "tegra";
    }
    {
      glob = "/dev/nvsciipc";
      platform = "tegra";
    }
    {
      glob = "/dev/host1x-fence";
      platform = "tegra";
    }
  ];

  checks = [
    # defaults
    (checkEqual "defaults" "the whole settings" defaults.settings {
      rule = [
        {
          name = "nvidia";
          features = cudaFeatures;
          device = expectedDevices;
          driver = {
            link = "/run/opengl-driver";
            required = true;
            host_libraries = false;
            compat = [ ];
          };
        }
      ];
    })
    (checkEqual "defaults" "config.toml" defaults.toml (builtins.readFile ./expected/default.toml))
    (checkEqual "defaults" "nix.settings.pre-build-hook" defaults.hook
      "${builtins.storeDir}/00000000000000000000000000000000-cuda-sandbox-0.1.0/bin/cuda-sandbox-hook"
    )
    (checkEqual "defaults" "nix.settings.system-features (Nix's defaults kept, then the module's)"
      defaults.system-features
      (nixDefaults ++ cudaFeatures)
    )
    (checkEqual "defaults" "failed assertions" defaults.failed [ ])
    (checkEqual "defaults" "warnings" defaults.warnings [ ])
    (check "defaults" (
      defaults.uvm != null
      && defaults.uvm.before == [ "nix-daemon.service" ]
      && lib.hasInfix "modprobe nvidia-uvm" defaults.uvm.script
      && lib.elem "/proc/driver/nvidia/version" defaults.uvm.unitConfig.ConditionPathExists
    ) "a oneshot creates /dev/nvidia-uvm before nix-daemon, when the NVIDIA driver is loaded")

    # compat
    (checkEqual "compat" "driver.compat" withCompat.nvidia.driver.compat [
      "${builtins.storeDir}/11111111111111111111111111111111-cuda_compat-12.9/compat"
      "/usr/local/cuda-12.9/compat"
    ])
    (check "compat" (lib.hasInfix ''
      compat = ["${builtins.storeDir}/11111111111111111111111111111111-cuda_compat-12.9/compat", "/usr/local/cuda-12.9/compat"]
    '' withCompat.toml) "config.toml lists the compat directories")

    # extra devices and paths, freeform settings, a user rule
    (checkEqual "devices" "the device list" withDevices.nvidia.device (
      expectedDevices
      ++ [
        {
          glob = "/dev/infiniband/uverbs*";
          required = false;
        }
        {
          glob = "/dev/nvidia-fs*";
          required = true;
          hint = "load nvidia-fs";
        }
      ]
    ))
    (checkEqual "devices" "the paths" withDevices.nvidia.path [
      {
        path = "/etc/nvidia";
        required = false;
      }
    ])
    (checkEqual "devices" "rule names, in order" (map (r: r.name) withDevices.settings.rule) [
      "nvidia"
      "rdma"
    ])
    (checkEqual "devices" "closure_cache" withDevices.settings.closure_cache "/var/cache/gpu-closures")
    (checkEqual "devices" "missing_drv" withDevices.settings.missing_drv "expose")
    (checkEqual "devices" "system-features" withDevices.system-features (nixDefaults ++ [ "cuda" ]))

    # the user's own system-features: the assertion says what to add
    (checkEqual "user-features" "system-features" userFeatures.system-features [ "kvm" ])
    (check "user-features" (
      lib.length userFeatures.failed == 1
      && lib.hasInfix "lacks cuda, gpu, nvidia-gpu, opengl" (lib.head userFeatures.failed)
    ) "one assertion naming the missing features, got ${builtins.toJSON userFeatures.failed}")

    # sandbox off: the hook would never run
    (check "sandbox-off" (
      lib.length sandboxOff.failed == 1
      && lib.hasInfix "nix.settings.sandbox is false" (lib.head sandboxOff.failed)
      && lib.hasInfix "Nix runs a pre-build-hook only" (lib.head sandboxOff.failed)
    ) "one assertion about the sandbox, got ${builtins.toJSON sandboxOff.failed}")

    # no hardware.graphics: a warning, not an error (the driver link may come from elsewhere)
    (check "no-graphics" (
      noGraphics.failed == [ ]
      && lib.length noGraphics.warnings == 1
      && lib.hasInfix "hardware.graphics.enable is false" (lib.head noGraphics.warnings)
    ) "one warning about hardware.graphics, got ${builtins.toJSON noGraphics.warnings}")

    # disabled: nothing at all
    (check "disabled" (
      disabled.hook == null
      && disabled.system-features == nixDefaults
      && disabled.uvm == null
      && disabled.failed == [ ]
    ) "the module sets nothing when not enabled")

    # the negative controls
    (checkEqual "control: plain definition" "system-features" plainDefinition.system-features
      cudaFeatures
    )
    (checkEqual "control: mkOptionDefault" "system-features" optionDefault.system-features nixDefaults)
  ];
in
assert lib.all lib.id checks;
{
  passed = lib.length checks;
  configs = {
    default = defaults.toml;
    compat = withCompat.toml;
    devices = withDevices.toml;
  };
}
