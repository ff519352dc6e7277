# Evaluation test of nixos-module/ (programs.cuda-sandbox) with the real Nixpkgs `lib` and the
# stubs of ./stubs.nix in place of NixOS and Nixpkgs.
#
#   nix-instantiate --eval --strict nix-tests/module-eval.nix --arg lib 'import /path/to/nixpkgs.lib/lib'
#
# Every check is an `assert`: a failure stops the evaluation with a message naming the case
# and what differed. The result holds the rendered config.toml of each case, which nix-tests/run
# writes to files and gives to `cuda-sandbox-hook check-config`: that proves the module renders
# what the hook accepts. `refused` holds the cases the hook must refuse, with the rule it must
# name. With `fakeRoot` (a directory nix-tests/fake-host-explain fills), `hosts` holds the
# migration cases rendered for that fake host, with the features to `explain` and the paths
# the build must then see: the hook, not this file, says what they expose.
{
  lib,
  fakeRoot ? null,
}:
let
  stubs = import ./stubs.nix { inherit lib; };

  evalWith =
    pkgs: config:
    lib.evalModules {
      modules = [
        stubs.module
        ../nixos-module
        config
      ];
      specialArgs.pkgs = pkgs;
    };
  eval = evalWith stubs.pkgs;

  # The configuration as the system would see it, with the failing assertions and warnings.
  systemWith =
    pkgs: config:
    let
      c = (evalWith pkgs config).config;
      etc = c.environment.etc."cuda-sandbox/config.toml".source;
    in
    {
      inherit (c.nix.settings) system-features;
      hook = c.nix.settings.pre-build-hook or null;
      toml = etc.text;
      settings = etc.value;
      nvidia = lib.findFirst (r: r.name == "nvidia") null etc.value.rule;
      failed = map (a: a.message) (lib.filter (a: !a.assertion) c.assertions);
      inherit (c) warnings;
      udevRules = c.services.udev.extraRules;
      services = c.systemd.services;
      modprobe = c.boot.extraModprobeConfig;
      packages = c.environment.systemPackages;
      maintainers = c.meta.maintainers;
      rules = etc.value.rule;
      nixConf = c.environment.etc."nix/nix.conf".source.text or null;
      graphics = c.hardware.graphics.enable;
      zluda = c.hardware.amdgpu.zluda.enable or null;
      patterns = c.programs.cuda-sandbox.allowedPatterns;
    };
  system = systemWith stubs.pkgs;

  # Whether evaluating `value` fails (a type error, an assertion).
  fails = value: !(builtins.tryEval (builtins.deepSeq value value)).success;

  package = stubs.pkgs.cuda-sandbox;
  hookPath = "${package}/bin/cuda-sandbox-hook";

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
      features = lib.mkForce [ "cuda" ];
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

  # programs.cuda-sandbox.sysfs: the rule's read-only part of /sys.
  withSysfs = system {
    imports = [ enabled ];
    programs.cuda-sandbox.sysfs = "topology";
  };

  # programs.cuda-sandbox.cdi: the toolkit's option declared (on, off), and absent.
  toolkitOff = system {
    imports = [
      enabled
      stubs.toolkitModule
    ];
  };
  toolkitOn = system toolkitOnConfig;
  cdiWithoutToolkit = system {
    imports = [ enabled ];
    programs.cuda-sandbox.cdi.enable = true;
  };
  cdiPerGpu = system {
    imports = [
      enabled
      stubs.toolkitModule
    ];
    hardware.nvidia-container-toolkit.enable = true;
    programs.cuda-sandbox.cdi.devices = [
      "0"
      "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
      "0:1"
    ];
    programs.cuda-sandbox.settings.gpus_per_build = 1;
  };
  # cdi.enable with spec directories of the user's own: /run/cdi left out, and kept.
  cdiWithoutRunCdi = system {
    imports = [ toolkitOnConfig ];
    programs.cuda-sandbox.settings.cdi_spec_dirs = [ "/etc/cdi" ];
  };
  cdiWithRunCdi = system {
    imports = [ toolkitOnConfig ];
    programs.cuda-sandbox.settings.cdi_spec_dirs = [
      "/etc/cdi"
      "/run/cdi"
    ];
  };
  toolkitOnConfig = {
    imports = [
      enabled
      stubs.toolkitModule
    ];
    hardware.nvidia-container-toolkit.enable = true;
  };
  cdiBadDevice = system {
    imports = [ enabled ];
    programs.cuda-sandbox.cdi = {
      enable = true;
      devices = [ "nvidia.com/gpu=all" ];
    };
  };
  cdiHint =
    "start the unit that writes /run/cdi/nvidia-container-toolkit.json: "
    + "systemctl start nvidia-container-toolkit-cdi-generator.service "
    + "(journalctl -u nvidia-container-toolkit-cdi-generator says why it did not run; "
    + "it needs hardware.nvidia-container-toolkit.enable)";
  tegraGlobs = lib.filter (d: (d.platform or null) == "tegra") defaults.nvidia.device;

  # A user's own plain definition replaces Nixpkgs' defaults and the module's features alike.
  userFeatures = system {
    imports = [ enabled ];
    nix.settings.system-features = [ "kvm" ];
  };

  sandboxOff = system {
    imports = [ enabled ];
    nix.settings.sandbox = false;
  };

  # The preset turns hardware.graphics on (mkDefault, as Nixpkgs' since NixOS/nixpkgs#488199);
  # turned off again, a warning.
  graphicsByDefault = system { programs.cuda-sandbox.enable = true; };
  noGraphics = system {
    programs.cuda-sandbox.enable = true;
    hardware.graphics.enable = false;
  };

  # The features through extra-system-features, beside the user's own system-features.
  extraFeatures = system {
    imports = [ enabled ];
    nix.settings.system-features = [ "kvm" ];
    nix.settings.extra-system-features = cudaFeatures;
  };

  # Nix managed outside NixOS: no nix.conf from NixOS, so a warning with the lines to add.
  nixDisabled = system {
    imports = [ enabled ];
    nix.enable = false;
  };

  # hardware.nvidia drives the GPU: it already loads nvidia-uvm and makes the node.
  withNvidiaModule = system {
    imports = [ enabled ];
    services.xserver.videoDrivers = [ "nvidia" ];
  };
  withDatacenterDriver = system {
    imports = [ enabled ];
    hardware.nvidia.datacenter.enable = true;
    programs.cuda-sandbox.createUvmNode = true;
  };

  # A dedicated GPU builder, and a user's own policy over it.
  dedicated = system {
    imports = [ enabled ];
    programs.cuda-sandbox.dedicatedBuilder = true;
  };
  dedicatedButFail = system {
    imports = [ enabled ];
    programs.cuda-sandbox.dedicatedBuilder = true;
    programs.cuda-sandbox.settings.missing_drv = "fail";
  };

  # Typed settings refuse what the hook would refuse.
  badPolicy = system {
    imports = [ enabled ];
    programs.cuda-sandbox.settings.missing_drv = "sometimes";
  };
  badGpus = system {
    imports = [ enabled ];
    programs.cuda-sandbox.settings.gpus_per_build = -1;
  };
  badCache = system {
    imports = [ enabled ];
    programs.cuda-sandbox.settings.closure_cache = "relative/cache";
  };

  # cuda_compat: unavailable under a default config (the stub); available where Nixpkgs' CUDA
  # binaries would load it (cudaSupport, unfree allowed, a platform NVIDIA ships it for).
  availableCompat = stubs.fakePackage "cuda_compat-12.9" // {
    meta.available = true;
  };
  compatPkgs = stubs.pkgs // {
    cudaPackages.cuda_compat = availableCompat;
  };
  compatByDefault = systemWith compatPkgs enabled;
  unavailableCompat = system {
    imports = [ enabled ];
    programs.cuda-sandbox.compat = [
      stubs.pkgs.cudaPackages.cuda_compat
      "/usr/local/cuda-12.9/compat"
    ];
  };

  disabled = system { };

  # --- the fleet's cuda-sm-* features (nixos-module/fleet-features.nix) ---------------------
  # The lists are written out from Nixpkgs' _cuda.db at the commit gpus.txt pins
  # (ConnorBaker/nixpkgs 748b3c28), by the convention's three rules, by hand.
  smTo89 = map (n: "cuda-sm-${n}") [
    "35"
    "37"
    "50"
    "52"
    "60"
    "61"
    "70"
    "72"
    "75"
    "80"
    "86"
    "87"
    "89"
  ];
  sorted = lib.sort lib.lessThan;
  fleet = system {
    imports = [ enabled ];
    programs.cuda-sandbox.cudaCapabilities = [ "8.9" ];
  };
  # Two definitions join, as lists do; a 9.0 and a 10.0 give the union (both 'a' features).
  fleetUnion = system {
    imports = [
      enabled
      { programs.cuda-sandbox.cudaCapabilities = [ "9.0" ]; }
    ];
    programs.cuda-sandbox.cudaCapabilities = [ "10.0" ];
  };
  fleetFeatureSet = system {
    imports = [ enabled ];
    programs.cuda-sandbox.cudaCapabilities = [
      "9.0a"
      "8.9"
    ];
  };
  fleetUnknown = system {
    imports = [ enabled ];
    programs.cuda-sandbox.cudaCapabilities = [
      "13.0"
      "8.8"
      "7.5"
    ];
  };
  fleetUserFeatures = system {
    imports = [ enabled ];
    programs.cuda-sandbox.cudaCapabilities = [ "7.5" ];
    nix.settings.system-features = [ "kvm" ] ++ cudaFeatures;
  };
  # A Nixpkgs with the convention: its answer is taken, its db decides what is known.
  withNixpkgsCuda = stubs.pkgs // {
    _cuda = {
      lib.getCudaSystemFeatures = map (c: "from-nixpkgs-${c}");
      db.cudaCapabilityToInfo."8.9" = { };
    };
  };
  fleetNixpkgs = systemWith withNixpkgsCuda {
    imports = [ enabled ];
    programs.cuda-sandbox.cudaCapabilities = [ "8.9" ];
  };
  fleetNixpkgsUnknown = systemWith withNixpkgsCuda {
    imports = [ enabled ];
    programs.cuda-sandbox.cudaCapabilities = [ "12.1" ];
  };
  # A Nixpkgs from before the convention (NixOS/nixpkgs 1da571d: a _cuda.lib without it).
  fleetOldNixpkgs =
    systemWith (stubs.pkgs // { _cuda.lib.dropDots = lib.replaceStrings [ "." ] [ "" ]; })
      {
        imports = [ enabled ];
        programs.cuda-sandbox.cudaCapabilities = [ "8.9" ];
      };
  fleetDisabled = system { programs.cuda-sandbox.cudaCapabilities = [ "8.9" ]; };

  # The GPU inventory's unit (nixos-module/inventory.nix), on by default; a Jetson's
  # capability instead, rendered as tegra_capability (which check-config must accept).
  inventoryUnit = (system enabled).services.cuda-sandbox-inventory or null;
  jetson = system {
    imports = [ enabled ];
    programs.cuda-sandbox.tegraCapability = "8.7";
  };
  jetsonFeatureSet = system {
    imports = [ enabled ];
    programs.cuda-sandbox.tegraCapability = "8.7a";
  };

  # programs.nix-required-mounts' configuration, under programs.cuda-sandbox: Nixpkgs' own
  # nixosTests.nix-required-mounts (nixos/tests/nix-required-mounts/default.nix): the feature
  # `supported-feature`, the path /supported-feature-files, a { host; guest; } mount of a
  # directory at the driver link's lib/, unsafeFollowSymlinks; system-features set by hand;
  # no preset. Plus a package and a device glob, as the nvidia-gpu preset lists them.
  # `drivers`: where the mounted directory is (a fake host has it inside its root).
  requiredMountsMachine = drivers: {
    nix.settings.system-features = [ "supported-feature" ];
    programs.cuda-sandbox.enable = true;
    programs.cuda-sandbox.presets.nvidia-gpu.enable = false;
    programs.cuda-sandbox.allowedPatterns.supported-feature = {
      onFeatures = [ "supported-feature" ];
      paths = [
        "/supported-feature-files"
        {
          host = drivers;
          guest = "/run/opengl-driver/lib";
        }
      ];
      unsafeFollowSymlinks = true;
    };
  };
  requiredMountsConfig = requiredMountsMachine "/usr/lib/imaginary-fhs-drivers";
  requiredMounts = system requiredMountsConfig;
  ruleNamed = name: s: lib.findFirst (r: r.name == name) null s.rules;
  requiredMountsExtended = system {
    imports = [ requiredMountsConfig ];
    programs.cuda-sandbox.allowedPatterns.supported-feature.paths = [
      "/dev/video*"
      (stubs.fakePackage "mesa-25.0")
    ];
    # onFeatures defaults to the pattern's name, as in nix-required-mounts.
    programs.cuda-sandbox.allowedPatterns.ipfs.paths = [ "/ipfs" ];
    programs.cuda-sandbox.extraWrapperArgs = [
      "--add-flags"
      "-v"
    ];
  };
  requiredMountsWithPreset = system {
    imports = [ enabled ];
    programs.cuda-sandbox.presets.nvidia-gpu.enable = true;
    programs.cuda-sandbox.allowedPatterns.ipfs.paths = [ "/ipfs" ];
  };
  requiredMountsBadGlob = system {
    imports = [ requiredMountsConfig ];
    programs.cuda-sandbox.allowedPatterns.supported-feature.paths = [ "/usr/lib/libfoo*.so" ];
  };
  requiredMountsNvidia = system {
    imports = [ enabled ];
    programs.cuda-sandbox.allowedPatterns.nvidia.paths = [ "/ipfs" ];
  };

  # The NixOS-CUDA builders' setting (nixos-cuda/infra), with the prefix renamed: their common
  # NVIDIA module (modules/common/nvidia.nix) enables the preset and defines the pattern's
  # onFeatures from an option whose default is [ ]; host ada (hosts/ada/default.nix) defines
  # them as [ "cuda-ada" ]. In nix-required-mounts both join the preset's, so `cuda-ada`
  # builds get the GPU: here they join the rule nvidia.
  nixosCudaCommon = extra: {
    services.xserver.videoDrivers = [ "nvidia" ];
    hardware.graphics.enable = true;
    programs.cuda-sandbox = {
      enable = true;
      presets.nvidia-gpu.enable = true;
      allowedPatterns.nvidia-gpu.onFeatures = [ ];
    };
    imports = [ extra ];
  };
  nixosCudaAda = {
    hardware.nvidia.open = true;
    programs.cuda-sandbox.allowedPatterns.nvidia-gpu.onFeatures = [ "cuda-ada" ];
  };
  nixosCudaBuilder = system (nixosCudaCommon nixosCudaAda);
  cudaAdaFeatures = cudaFeatures ++ [ "cuda-ada" ];

  # --- Nixpkgs' current nix-required-mounts (./nix-required-mounts.nix), migrated ------------
  upstream = import ./nix-required-mounts.nix;
  # NixOS's amdgpu module declares hardware.amdgpu.zluda.enable ("CUDA support using ZLUDA
  # runtime library", an enable option: false by default); older NixOS has no such option.
  amdgpuModule = {
    options.hardware.amdgpu.zluda.enable = lib.mkEnableOption "CUDA support using ZLUDA";
  };
  # A configuration of that module with the preset zluda (as its users write it), the prefix
  # renamed; without presets.nvidia-gpu there, so off here.
  zludaMachine = {
    imports = [ amdgpuModule ];
    hardware.graphics.enable = true;
    hardware.amdgpu.zluda.enable = true;
    programs.cuda-sandbox = {
      enable = true;
      presets.nvidia-gpu.enable = false;
      presets.zluda.enable = true;
    };
  };
  zluda = system zludaMachine;
  amdOf = s: lib.findFirst (r: r.name == "amd") null s.rules;
  # The preset alone: what it turns on, at mkDefault; the user's own value wins.
  zludaDefaults = system {
    imports = [ amdgpuModule ];
    programs.cuda-sandbox.enable = true;
    programs.cuda-sandbox.presets.zluda.enable = true;
  };
  zludaUserOff = system {
    imports = [ amdgpuModule ];
    programs.cuda-sandbox.enable = true;
    programs.cuda-sandbox.presets.zluda.enable = true;
    hardware.amdgpu.zluda.enable = false;
  };
  # A NixOS without the option: the preset still evaluates.
  zludaOldNixos = system {
    programs.cuda-sandbox.enable = true;
    programs.cuda-sandbox.presets.zluda.enable = true;
  };
  # Both presets: a `cuda` build gets both rules.
  bothVendors = system {
    imports = [ zludaMachine ];
    programs.cuda-sandbox.presets.nvidia-gpu.enable = lib.mkForce true;
  };
  # The pattern extends the rule amd, as nvidia-gpu extends nvidia; `cuda` can be left out.
  zludaExtended = system {
    imports = [ zludaMachine ];
    programs.cuda-sandbox.allowedPatterns.zluda = {
      onFeatures = lib.mkForce [
        "amd-gpu"
        "rocm"
      ];
      paths = [ "/dev/video*" ];
    };
  };
  zludaLeased = system {
    imports = [ zludaMachine ];
    programs.cuda-sandbox.settings.gpus_per_build = 1;
  };
  zludaNamedAmd = system {
    imports = [ zludaMachine ];
    programs.cuda-sandbox.allowedPatterns.amd.paths = [ "/ipfs" ];
  };
  # safePrefixes: accepted, its default the upstream one, the rendering unchanged.
  safePrefixes = system {
    imports = [ requiredMountsConfig ];
    programs.cuda-sandbox.allowedPatterns.supported-feature.safePrefixes = [
      builtins.storeDir
      "/opt"
    ];
  };

  # How the rule amd covers each path of the upstream preset: a predicate on the rule. A path
  # upstream adds without an entry here fails the test.
  hasDevice = rule: glob: lib.any (d: d.glob == glob) rule.device;
  zludaCoverage = {
    "<driverLink>" = rule: lib.any (p: p.path == "/run/opengl-driver" && p.required) rule.path;
    # By node: the by-path links name the same nodes.
    "/dev/dri" = rule: hasDevice rule "/dev/dri/card*" && hasDevice rule "/dev/dri/renderD*";
    "/dev/kfd" = rule: lib.any (d: d.glob == "/dev/kfd" && d.required) rule.device;
    "/sys/devices/virtual/kfd" = rule: rule.sysfs == "kfd";
    # What the links resolve to: the PCI devices of the DRM nodes, and the links.
    "/sys/dev/char/226:*" = rule: rule.sysfs == "kfd";
    # In the driver link's store closure (the link points at their environment).
    "<extraPackages>" = rule: zludaCoverage."<driverLink>" rule;
  };

  # nix-required-mounts' option text: "extend or override the exposed paths via
  # allowedPatterns.nvidia-gpu.paths". A path, a device glob, a mount and a package.
  presetPaths = system {
    imports = [ enabled ];
    programs.cuda-sandbox.allowedPatterns.nvidia-gpu.paths = [
      "/opt/nvidia-extra"
      "/dev/video*"
      {
        host = "/opt/fhs-driver";
        guest = "/usr/lib/fhs-driver";
      }
      (stubs.fakePackage "mesa-25.0")
    ];
  };
  # The preset defines unsafeFollowSymlinks = true, as Nixpkgs' does: false conflicts.
  presetNoFollow = system {
    imports = [ enabled ];
    programs.cuda-sandbox.allowedPatterns.nvidia-gpu.unsafeFollowSymlinks = false;
  };
  presetFollow = system {
    imports = [ enabled ];
    programs.cuda-sandbox.allowedPatterns.nvidia-gpu.unsafeFollowSymlinks = true;
  };
  # `features` adds: a plain list and mkAfter keep the built-in features, mkForce replaces them.
  featuresPlain = system {
    imports = [ enabled ];
    programs.cuda-sandbox.features = [ "cuda-ada" ];
  };
  featuresAfter = system {
    imports = [ enabled ];
    programs.cuda-sandbox.features = lib.mkAfter [ "cuda-ada" ];
  };
  featuresForced = system {
    imports = [ enabled ];
    programs.cuda-sandbox.features = lib.mkForce [ "cuda-ada" ];
  };

  # Rules that expose nothing: a pattern without paths, a settings.rule without sources.
  emptyPattern = system {
    imports = [ enabled ];
    nix.settings.extra-system-features = [ "ipfs" ];
    programs.cuda-sandbox.allowedPatterns.ipfs.paths = [ ];
  };
  emptySettingsRule = system {
    imports = [ enabled ];
    nix.settings.extra-system-features = [ "rdma" ];
    programs.cuda-sandbox.settings.rule = [
      {
        name = "rdma";
        features = [ "rdma" ];
      }
    ];
  };

  # The same cases on nix-tests/fake-host-explain's fake host: its root, the hook's state
  # beside it, and mounts of directories inside it (a mount's source is a literal host path).
  onFakeHost = {
    programs.cuda-sandbox.settings = {
      host_root = fakeRoot;
      runtime_dir = "${fakeRoot}.state/run";
      closure_cache = "${fakeRoot}.state/closures";
    };
  };
  fakeHosts = {
    nixos-cuda-builder = {
      config = nixosCudaCommon {
        imports = [
          nixosCudaAda
          onFakeHost
        ];
      };
      features = "cuda-ada";
      sees = [
        "/dev/nvidia0"
        "/dev/nvidiactl"
        "/dev/nvidia-uvm"
        "/run/opengl-driver"
      ];
    };
    preset-paths = {
      config = {
        imports = [
          enabled
          onFakeHost
        ];
        programs.cuda-sandbox.allowedPatterns.nvidia-gpu.paths = [
          "/opt/nvidia-extra"
          "/dev/video*"
          {
            host = "${fakeRoot}/opt/fhs-driver";
            guest = "/usr/lib/fhs-driver";
          }
        ];
      };
      features = "cuda";
      sees = [
        "/dev/nvidia0"
        "/run/opengl-driver"
        "/opt/nvidia-extra"
        "/dev/video0"
        "/usr/lib/fhs-driver"
      ];
    };
    # programs.cuda-sandbox.cdi from the toolkit, its spec (hook/tests/cdi/nixos-two-gpus.json:
    # two GPUs, each with its DRM nodes) put in /run/cdi by nix-tests/fake-host-explain in a
    # private mount namespace: without leases a build sees both GPUs' nodes; with one GPU per
    # build (none leased yet: GPU 0) GPU 0's only.
    cdi-toolkit = {
      config.imports = [
        toolkitOnConfig
        onFakeHost
      ];
      features = "cuda";
      runCdi = "nixos-two-gpus.json";
      sees = [
        "/dev/nvidia0"
        "/dev/nvidia1"
        "/dev/dri/card1"
        "/dev/dri/card2"
        "/dev/dri/renderD128"
        "/dev/dri/renderD129"
        "/dev/nvidiactl"
        "/dev/nvidia-uvm"
        "/run/opengl-driver"
      ];
    };
    cdi-leased = {
      config = {
        imports = [
          toolkitOnConfig
          onFakeHost
        ];
        programs.cuda-sandbox.settings.gpus_per_build = 1;
      };
      features = "cuda";
      runCdi = "nixos-two-gpus.json";
      sees = [
        "/dev/nvidia0"
        "/dev/dri/card1"
        "/dev/dri/renderD128"
        "/dev/nvidiactl"
        "/dev/nvidia-uvm"
        "/run/opengl-driver"
      ];
      absent = [
        "/dev/nvidia1"
        "/dev/dri/card2"
        "/dev/dri/renderD129"
      ];
    };
    # nixos/tests/nix-required-mounts' machine, renamed; its tmpfiles rules are the fake
    # host's, with a relative link where the test's is absolute (a mount's links are looked up
    # literally, and the fake /usr is inside the fake root): the build sees the link's target
    # where the link leads inside, beside the mounted directory.
    required-mounts = {
      config = {
        imports = [
          (requiredMountsMachine "${fakeRoot}/usr/lib/imaginary-fhs-drivers")
          onFakeHost
        ];
      };
      features = "supported-feature";
      sees = [
        "/supported-feature-files"
        "/run/opengl-driver/lib"
        "/run/opengl-driver/libcuda.so"
      ];
    };
  };

  # meta.maintainers as NixOS checks it: entries of lib.maintainers only, by file.
  foreignMaintainer = system {
    imports = [ enabled ];
    meta.maintainers = [
      {
        name = "someone";
        github = "someone";
      }
    ];
  };
  listedMaintainer = system {
    imports = [ enabled ];
    meta.maintainers = [ stubs.maintainers.alice ];
  };

  # The features as NixOS users write them: nix.settings' free-form type takes a string, and
  # nix.extraOptions lines come after the settings in nix.conf.
  stringFeatures = system {
    imports = [ enabled ];
    nix.settings.system-features = [ "kvm" ];
    nix.settings.extra-system-features = "cuda gpu  nvidia-gpu opengl";
  };
  extraOptionsFeatures = system {
    imports = [ enabled ];
    nix.settings.system-features = [ "kvm" ];
    nix.extraOptions = ''
      keep-outputs = true
      extra-system-features = cuda gpu
      	extra-system-features	=  nvidia-gpu opengl
    '';
  };
  # A later `system-features` line replaces what came before it, as Nix reads nix.conf.
  extraOptionsReplace = system {
    imports = [ enabled ];
    nix.settings.extra-system-features = cudaFeatures;
    nix.extraOptions = "system-features = kvm";
  };

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
      missing_drv = "skip";
      gpus_per_build = 0;
      lease_wait_seconds = 600;
      closure_cache = "/var/cache/cuda-sandbox/closures";
      runtime_dir = "/run/cuda-sandbox";
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
          mig = { };
        }
      ];
    })
    (checkEqual "defaults" "config.toml" defaults.toml (builtins.readFile ./expected/default.toml))
    (checkEqual "defaults" "nix.settings.pre-build-hook (lib.getExe)" defaults.hook
      "${builtins.storeDir}/00000000000000000000000000000000-cuda-sandbox-0.1.0/bin/cuda-sandbox-hook"
    )
    (check "defaults" (lib.elem package defaults.packages)
      "the package is in environment.systemPackages (explain, check-config on PATH)"
    )
    (check "defaults" (!(fails defaults.maintainers) && defaults.maintainers == { })
      "meta.maintainers (checked against lib.maintainers, as NixOS does) evaluates and the module adds none"
    )
    (check "control: meta.maintainers" (fails foreignMaintainer.maintainers)
      "an entry outside lib.maintainers fails, as on NixOS unstable (the stand-in checks)"
    )
    (checkEqual "control: meta.maintainers" "a lib.maintainers entry, by file"
      (lib.attrValues listedMaintainer.maintainers)
      [ [ stubs.maintainers.alice ] ]
    )
    (check "defaults" (
      defaults.nixConf != null
      && lib.hasInfix "pre-build-hook = ${hookPath}\n" defaults.nixConf
      && lib.hasInfix "system-features = nixos-test benchmark big-parallel kvm cuda gpu nvidia-gpu opengl\n" defaults.nixConf
    ) "nix.conf has the hook and all features, got ${toString defaults.nixConf}")
    (checkEqual "defaults" "nix.settings.system-features (Nix's defaults kept, then the module's)"
      defaults.system-features
      (nixDefaults ++ cudaFeatures)
    )
    (checkEqual "defaults" "failed assertions" defaults.failed [ ])
    (checkEqual "defaults" "warnings" defaults.warnings [ ])
    (check "defaults"
      (
        lib.hasInfix "softdep nvidia post: nvidia-uvm" defaults.modprobe
        && lib.hasInfix ''ACTION=="add", KERNEL=="nvidia_uvm", RUN+="'' defaults.udevRules
      )
      "nvidia-uvm loads with nvidia, and a udev rule makes its nodes when it loads, got ${defaults.modprobe} ${defaults.udevRules}"
    )
    (check "defaults" (
      builtins.match ''.*RUN\+="[^"]*-cuda-sandbox-nvidia-uvm-nodes".*'' defaults.udevRules != null
    ) "the rule runs the script that makes the nodes")

    # compat
    (checkEqual "compat" "default compat, cuda_compat unavailable" defaults.nvidia.driver.compat [ ])
    (checkEqual "compat" "default compat, cuda_compat available" compatByDefault.nvidia.driver.compat [
      "${availableCompat}/compat"
    ])
    (checkEqual "compat" "failed assertions, cuda_compat available" compatByDefault.failed [ ])
    (checkEqual "compat" "an unavailable package is left out of the file"
      unavailableCompat.nvidia.driver.compat
      [ "/usr/local/cuda-12.9/compat" ]
    )
    (check "compat" (
      lib.length unavailableCompat.failed == 1
      && lib.hasInfix "cuda_compat-12.9, which is not available" (lib.head unavailableCompat.failed)
      && lib.hasInfix "nixpkgs.config.cudaSupport = true" (lib.head unavailableCompat.failed)
    ) "one assertion saying what to set, got ${builtins.toJSON unavailableCompat.failed}")
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
    (checkEqual "devices" "system-features: every rule's features" withDevices.system-features (
      nixDefaults
      ++ [
        "cuda"
        "rdma"
      ]
    ))

    # the user's own system-features: the assertion says what to add
    (checkEqual "user-features" "system-features" userFeatures.system-features [ "kvm" ])
    (check "user-features" (
      lib.length userFeatures.failed == 1
      && lib.hasInfix "has cuda, gpu, nvidia-gpu, opengl" (lib.head userFeatures.failed)
      && lib.hasInfix "extra-system-features" (lib.head userFeatures.failed)
    ) "one assertion naming the missing features, got ${builtins.toJSON userFeatures.failed}")
    (checkEqual "extra-features" "failed assertions (extra-system-features counts)" extraFeatures.failed
      [ ]
    )
    (check "extra-features" (
      lib.hasInfix "extra-system-features = cuda gpu nvidia-gpu opengl\n" extraFeatures.nixConf
      && lib.hasInfix "system-features = kvm\n" extraFeatures.nixConf
    ) "nix.conf has both lines, got ${extraFeatures.nixConf}")

    (checkEqual "string-features" "failed assertions (a string is split on whitespace)"
      stringFeatures.failed
      [ ]
    )
    (check "string-features"
      (lib.hasInfix "extra-system-features = cuda gpu  nvidia-gpu opengl\n" stringFeatures.nixConf)
      "nix.conf has the string as written, got ${stringFeatures.nixConf}"
    )
    (checkEqual "extra-options" "failed assertions (nix.extraOptions counts)"
      extraOptionsFeatures.failed
      [ ]
    )
    (check "extra-options"
      (
        lib.length extraOptionsReplace.failed == 1
        && lib.hasInfix "has cuda, gpu, nvidia-gpu, opengl" (lib.head extraOptionsReplace.failed)
      )
      "a later system-features line in nix.extraOptions replaces the list, got ${builtins.toJSON extraOptionsReplace.failed}"
    )

    # coming from nix-required-mounts
    (checkEqual "required-mounts" "Nixpkgs' test configuration, as rules" requiredMounts.rules [
      {
        name = "supported-feature";
        features = [ "supported-feature" ];
        # unsafeFollowSymlinks: the links inside the directories bring their targets.
        path = [
          {
            path = "/supported-feature-files";
            required = true;
            follow_entry_symlinks = true;
          }
        ];
        mount = [
          {
            inside = "/run/opengl-driver/lib";
            outside = "/usr/lib/imaginary-fhs-drivers";
            required = true;
            follow_entry_symlinks = true;
          }
        ];
      }
    ])
    (checkEqual "required-mounts" "failed assertions and warnings" (
      requiredMounts.failed ++ requiredMounts.warnings
    ) [ ])
    (checkEqual "required-mounts" "the user's system-features" requiredMounts.system-features [
      "supported-feature"
    ])
    (check "required-mounts" (requiredMounts.hook == hookPath) "the hook is cuda-sandbox-hook")
    (checkEqual "required-mounts" "a device glob and a package, as the preset lists them"
      (ruleNamed "supported-feature" requiredMountsExtended).device
      [
        {
          glob = "/dev/video*";
          required = true;
        }
      ]
    )
    (check "required-mounts" (lib.elem
      {
        path = "${builtins.storeDir}/00000000000000000000000000000000-mesa-25.0";
        required = true;
        follow_entry_symlinks = true;
      }
      (ruleNamed "supported-feature" requiredMountsExtended).path
    ) "a package is a path (its closure comes with it)")
    (checkEqual "required-mounts" "onFeatures defaults to the name"
      (ruleNamed "ipfs" requiredMountsExtended)
      {
        name = "ipfs";
        features = [ "ipfs" ];
        path = [
          {
            path = "/ipfs";
            required = true;
          }
        ];
      }
    )
    (check "required-mounts"
      (
        lib.length requiredMountsExtended.failed == 1
        && lib.hasInfix "has ipfs" (lib.head requiredMountsExtended.failed)
      )
      "every rule's features must be system features, got ${builtins.toJSON requiredMountsExtended.failed}"
    )
    (check "required-mounts" (
      lib.length requiredMountsExtended.warnings == 1
      && lib.hasInfix "extraWrapperArgs is ignored" (lib.head requiredMountsExtended.warnings)
    ) "extraWrapperArgs: a warning")
    (checkEqual "required-mounts" "the preset is the rule nvidia, then the patterns"
      (map (r: r.name) requiredMountsWithPreset.rules)
      [
        "nvidia"
        "ipfs"
      ]
    )
    (checkEqual "required-mounts" "with the preset, both rules' features are added"
      requiredMountsWithPreset.system-features
      (nixDefaults ++ cudaFeatures ++ [ "ipfs" ])
    )
    (check "required-mounts" (
      lib.length requiredMountsBadGlob.failed == 1
      && lib.hasInfix "/usr/lib/libfoo*.so: a glob outside" (lib.head requiredMountsBadGlob.failed)
    ) "a glob outside /dev is refused, naming it, got ${builtins.toJSON requiredMountsBadGlob.failed}")
    (check "required-mounts"
      (lib.any (lib.hasInfix "allowedPatterns.nvidia: the name of the module's own rule") requiredMountsNvidia.failed)
      "a pattern named nvidia beside the preset is refused"
    )

    # Nixpkgs' current nix-required-mounts (./nix-required-mounts.nix), migrated
    (checkEqual "upstream" "pattern options: every upstream one is accepted" (lib.subtractLists [
      "onFeatures"
      "paths"
      "safePrefixes"
      "unsafeFollowSymlinks"
      "_module"
    ] (lib.attrNames zluda.patterns.zluda)) [ ])
    (checkEqual "upstream" "pattern options" (lib.sort lib.lessThan upstream.pattern.options) (
      lib.sort lib.lessThan (lib.filter (n: n != "_module") (lib.attrNames zluda.patterns.zluda))
    ))
    (checkEqual "upstream" "safePrefixes' default"
      requiredMounts.patterns.supported-feature.safePrefixes
      upstream.pattern.safePrefixes.default
    )
    (checkEqual "upstream" "safePrefixes changes nothing the hook is given" safePrefixes.rules
      requiredMounts.rules
    )
    (checkEqual "upstream" "nvidia-gpu: unsafeFollowSymlinks"
      defaults.patterns.nvidia-gpu.unsafeFollowSymlinks
      upstream.presets.nvidia-gpu.unsafeFollowSymlinks
    )
    (checkEqual "upstream" "nvidia-gpu: onFeatures" defaults.patterns.nvidia-gpu.onFeatures
      upstream.presets.nvidia-gpu.onFeatures
    )
    (checkEqual "upstream" "nvidia-gpu: hardware.graphics.enable by default" graphicsByDefault.graphics
      upstream.presets.nvidia-gpu.mkDefault."hardware.graphics.enable"
    )
    (checkEqual "upstream" "nvidia-gpu: ...at mkDefault" noGraphics.graphics false)
    (checkEqual "upstream" "nvidia-gpu: graphics on by default, no warning" (
      graphicsByDefault.failed ++ graphicsByDefault.warnings
    ) [ ])
    (checkEqual "zluda" "rules" (map (r: r.name) zluda.rules) [ "amd" ])
    (checkEqual "zluda" "the rule's features are the preset's" (amdOf zluda).features
      upstream.presets.zluda.onFeatures
    )
    (checkEqual "zluda" "system-features: Nix's defaults kept, the preset's added" zluda.system-features
      (nixDefaults ++ upstream.presets.zluda.onFeatures)
    )
    (checkEqual "zluda" "every upstream path has a rendering" (lib.attrNames zludaCoverage) (
      lib.sort lib.lessThan upstream.presets.zluda.paths
    ))
    (check "zluda" (lib.all (path: zludaCoverage.${path} (amdOf zluda))
      upstream.presets.zluda.paths
    ) "the rule amd covers every path of the upstream preset: ${builtins.toJSON (amdOf zluda)}")
    (checkEqual "zluda" "unsafeFollowSymlinks" zluda.patterns.zluda.unsafeFollowSymlinks
      upstream.presets.zluda.unsafeFollowSymlinks
    )
    (checkEqual "zluda" "the rule is the hook's amd-rule.toml" (amdOf zluda) (
      lib.head (lib.importTOML ../hook/amd-rule.toml).rule
    ))
    (checkEqual "zluda" "failed assertions and warnings" (zluda.failed ++ zluda.warnings) [ ])
    (checkEqual "zluda" "what the preset turns on" {
      "hardware.amdgpu.zluda.enable" = zludaDefaults.zluda;
      "hardware.graphics.enable" = zludaDefaults.graphics;
    } upstream.presets.zluda.mkDefault)
    (checkEqual "zluda" "...at mkDefault" zludaUserOff.zluda false)
    (checkEqual "zluda" "a NixOS without hardware.amdgpu.zluda" (map (r: r.name) zludaOldNixos.rules) [
      "nvidia"
      "amd"
    ])
    (checkEqual "zluda" "both presets: both rules answer cuda"
      (map (r: r.name) (lib.filter (r: lib.elem "cuda" r.features) bothVendors.rules))
      [
        "nvidia"
        "amd"
      ]
    )
    (checkEqual "zluda" "both presets: features once each" bothVendors.system-features (
      nixDefaults ++ lib.unique (cudaFeatures ++ upstream.presets.zluda.onFeatures)
    ))
    (checkEqual "zluda" "the pattern extends the rule"
      {
        inherit (amdOf zludaExtended) features;
        last = lib.last (amdOf zludaExtended).device;
      }
      {
        features = [
          "amd-gpu"
          "rocm"
        ];
        last = {
          glob = "/dev/video*";
          required = true;
        };
      }
    )
    (check "zluda" (lib.any (lib.hasInfix "GPU leases cannot confine") zludaLeased.failed)
      "leases with the preset: an assertion, got ${builtins.toJSON zludaLeased.failed}"
    )
    (check "zluda" (lib.any (lib.hasInfix "allowedPatterns.amd: the name") zludaNamedAmd.failed)
      "a pattern named amd beside the preset is refused"
    )

    # the preset is allowedPatterns.nvidia-gpu, as in nix-required-mounts
    (checkEqual "nixos-cuda" "rule names (no rule of its own for the pattern)" (map (
      r: r.name
    ) nixosCudaBuilder.rules) [ "nvidia" ])
    (checkEqual "nixos-cuda" "the rule's features: the preset's and cuda-ada"
      nixosCudaBuilder.nvidia.features
      cudaAdaFeatures
    )
    (checkEqual "nixos-cuda" "system-features: Nix's defaults kept, cuda-ada added"
      nixosCudaBuilder.system-features
      (nixDefaults ++ cudaAdaFeatures)
    )
    (checkEqual "nixos-cuda" "the GPU's devices" nixosCudaBuilder.nvidia.device expectedDevices)
    (checkEqual "nixos-cuda" "failed assertions and warnings" (
      nixosCudaBuilder.failed ++ nixosCudaBuilder.warnings
    ) [ ])
    (checkEqual "preset-paths" "rule names" (map (r: r.name) presetPaths.rules) [ "nvidia" ])
    (checkEqual "preset-paths" "the features stay the preset's" presetPaths.nvidia.features
      cudaFeatures
    )
    (checkEqual "preset-paths" "a device glob joins the devices" presetPaths.nvidia.device (
      expectedDevices
      ++ [
        {
          glob = "/dev/video*";
          required = true;
        }
      ]
    ))
    (checkEqual "preset-paths" "paths and a package join the paths, links followed as the preset does"
      presetPaths.nvidia.path
      [
        {
          path = "/opt/nvidia-extra";
          required = true;
          follow_entry_symlinks = true;
        }
        {
          path = "${builtins.storeDir}/00000000000000000000000000000000-mesa-25.0";
          required = true;
          follow_entry_symlinks = true;
        }
      ]
    )
    (checkEqual "preset-paths" "a mount" presetPaths.nvidia.mount [
      {
        inside = "/usr/lib/fhs-driver";
        outside = "/opt/fhs-driver";
        required = true;
        follow_entry_symlinks = true;
      }
    ])
    (checkEqual "preset-paths" "failed assertions" presetPaths.failed [ ])
    (check "preset-follow" (fails presetNoFollow.settings)
      "unsafeFollowSymlinks = false beside the preset is a conflicting definition, as in Nixpkgs"
    )
    (checkEqual "preset-follow" "unsafeFollowSymlinks = true agrees with the preset"
      presetFollow.settings
      defaults.settings
    )
    (checkEqual "features" "a plain list adds" (lib.sort lib.lessThan featuresPlain.nvidia.features) (
      lib.sort lib.lessThan cudaAdaFeatures
    ))
    (checkEqual "features" "mkAfter adds, after the built-in ones" featuresAfter.nvidia.features
      cudaAdaFeatures
    )
    (checkEqual "features" "mkForce replaces" featuresForced.nvidia.features [ "cuda-ada" ])
    (checkEqual "features" "system-features follow" featuresAfter.system-features (
      nixDefaults ++ cudaAdaFeatures
    ))
    (check "empty-rule" (
      lib.length emptyPattern.failed == 1
      && lib.hasInfix "the rule ipfs of" (lib.head emptyPattern.failed)
      && lib.hasInfix "exposes nothing" (lib.head emptyPattern.failed)
    ) "a pattern without paths is refused, naming it, got ${builtins.toJSON emptyPattern.failed}")
    (check "empty-rule" (
      lib.length emptySettingsRule.failed == 1
      && lib.hasInfix "the rule rdma of" (lib.head emptySettingsRule.failed)
    ) "a settings.rule without sources is refused, got ${builtins.toJSON emptySettingsRule.failed}")
    (checkEqual "empty-rule" "the module's own rule is never empty" defaults.failed [ ])

    # nix.enable = false: a warning with the lines to put in the nix.conf the user manages
    (check "nix-disabled" (
      nixDisabled.failed == [ ]
      && nixDisabled.nixConf == null
      && lib.length nixDisabled.warnings == 1
      && lib.hasInfix "nix.enable is false" (lib.head nixDisabled.warnings)
      && lib.hasInfix "pre-build-hook = ${hookPath}\n" (lib.head nixDisabled.warnings)
      && lib.hasInfix "extra-system-features = cuda gpu nvidia-gpu opengl\n" (
        lib.head nixDisabled.warnings
      )
    ) "one warning with the nix.conf lines, got ${builtins.toJSON nixDisabled.warnings}")

    # cdi: the rule follows hardware.nvidia-container-toolkit.enable, and evaluates without it
    (checkEqual "cdi: toolkit off" "the rule" toolkitOff.nvidia defaults.nvidia)
    (check "cdi: toolkit off" (
      !(defaults.nvidia ? cdi) && defaults.nvidia ? mig && lib.length defaults.nvidia.device > 5
    ) "no toolkit: the built-in globs and MIG, no cdi")
    (checkEqual "cdi: toolkit on" "the rule's CDI devices" (toolkitOn.nvidia.cdi or null) [
      "nvidia.com/gpu=all"
    ])
    (checkEqual "cdi: toolkit on" "the fix for a missing spec" (toolkitOn.nvidia.cdi_hint or null
    ) cdiHint)
    (check "cdi: toolkit on" (
      !(toolkitOn.nvidia ? mig)
      && toolkitOn.nvidia.device == tegraGlobs
      && tegraGlobs != [ ]
      && toolkitOn.nvidia.driver == defaults.nvidia.driver
      && toolkitOn.failed == [ ]
      && toolkitOn.warnings == [ ]
    ) "toolkit on: only Jetson's globs, no MIG source, the same driver, no warning")
    (check "cdi: no toolkit option"
      (
        cdiWithoutToolkit.nvidia.cdi == [ "nvidia.com/gpu=all" ]
        && lib.length cdiWithoutToolkit.warnings == 1
        && lib.hasInfix "nothing on this system writes /run/cdi" (lib.head cdiWithoutToolkit.warnings)
      )
      "cdi.enable without the toolkit: the rule, and a warning, got ${builtins.toJSON cdiWithoutToolkit.warnings}"
    )
    (checkEqual "cdi: per GPU" "the rule's CDI devices" cdiPerGpu.nvidia.cdi [
      "nvidia.com/gpu=0"
      "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
      "nvidia.com/gpu=0:1"
    ])
    (check "cdi: spec directories without /run/cdi" (
      lib.length cdiWithoutRunCdi.failed == 1
      && lib.hasInfix "leaves out /run/cdi" (lib.head cdiWithoutRunCdi.failed)
    ) "one failed assertion naming /run/cdi, got ${builtins.toJSON cdiWithoutRunCdi.failed}")
    (checkEqual "cdi: spec directories with /run/cdi" "the failed assertions" cdiWithRunCdi.failed [ ])
    (check "cdi: bad device" (fails cdiBadDevice.toml)
      "a fully qualified name in cdi.devices is refused"
    )

    # createUvmNode: off where hardware.nvidia already makes /dev/nvidia-uvm
    (check "nvidia-module" (
      !lib.hasInfix "nvidia_uvm" withNvidiaModule.udevRules && withNvidiaModule.modprobe == ""
    ) "no second nvidia-uvm rule when hardware.nvidia is enabled")
    (check "nvidia-module" (lib.hasInfix "nvidia_uvm" withDatacenterDriver.udevRules)
      "an explicit createUvmNode = true still wins"
    )

    # dedicated GPU builder
    (checkEqual "dedicated" "missing_drv" dedicated.settings.missing_drv "expose")
    (checkEqual "dedicated" "the user's own missing_drv wins" dedicatedButFail.settings.missing_drv
      "fail"
    )

    # typed settings
    (check "typed-settings" (fails badPolicy.settings) "missing_drv = \"sometimes\" is refused")
    (check "typed-settings" (fails badGpus.settings) "gpus_per_build = -1 is refused")
    (check "typed-settings" (fails badCache.settings) "a relative closure_cache is refused")

    # sandbox off: the hook would never run
    (check "sandbox-off" (
      lib.length sandboxOff.failed == 1
      && lib.hasInfix "nix.settings.sandbox is false" (lib.head sandboxOff.failed)
      && lib.hasInfix "sees all of its devices and libraries, tagged or not" (lib.head sandboxOff.failed)
      && lib.hasInfix "pre-build-hook only" (lib.head sandboxOff.failed)
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
      && disabled.packages == [ ]
      && disabled.system-features == nixDefaults
      && disabled.udevRules == ""
      && disabled.failed == [ ]
    ) "the module sets nothing when not enabled")

    (checkEqual "sysfs" "the rule's sysfs" withSysfs.nvidia.sysfs "topology")
    (check "sysfs" (!(defaults.nvidia ? sysfs)) "no sysfs unless asked for")
    (check "sysfs" (fails
      (system {
        imports = [ enabled ];
        programs.cuda-sandbox.sysfs = "all";
      }).toml
    ) "only the parts the hook knows are accepted")

    # the fleet's features
    (checkEqual "fleet" "system-features: Nix's defaults, the rule's and the GPU's"
      (sorted fleet.system-features)
      (sorted (nixDefaults ++ cudaFeatures ++ smTo89))
    )
    (checkEqual "fleet" "failed assertions" fleet.failed [ ])
    (check "fleet" (
      lib.hasInfix " cuda-sm-35 " fleet.nixConf && lib.hasInfix " cuda-sm-89\n" fleet.nixConf
    ) "nix.conf's system-features has the cuda-sm-* features, got ${toString fleet.nixConf}")
    (checkEqual "fleet" "no rule selects by cuda-sm-*: the rule nvidia keeps its features"
      fleet.nvidia.features
      cudaFeatures
    )
    (checkEqual "fleet-union" "the union of a 9.0 and a 10.0"
      (lib.subtractLists (nixDefaults ++ cudaFeatures) fleetUnion.system-features)
      (
        smTo89
        ++ [
          "cuda-sm-90"
          "cuda-sm-90a"
          "cuda-sm-100"
          "cuda-sm-100a"
          "cuda-sm-100f"
        ]
      )
    )
    (check "fleet-feature-set" (
      lib.length fleetFeatureSet.failed == 1
      && lib.hasInfix "9.0a is a\nfeature set rather than a GPU" (lib.head fleetFeatureSet.failed)
      && lib.hasInfix "give the GPU's\ncapability, 9.0." (lib.head fleetFeatureSet.failed)
    ) "one assertion: 9.0a is a feature set, got ${builtins.toJSON fleetFeatureSet.failed}")
    (check "fleet-feature-set" (lib.all (
      f: lib.elem f fleetFeatureSet.system-features
    ) smTo89) "the valid capability still advertises")
    (check "fleet-unknown" (
      lib.length fleetUnknown.failed == 1
      && lib.hasInfix "cuda-sandbox's capability table (following ConnorBaker/nixpkgs 748b3c288fc42b23b2b66ddda7c36f8d1c6ae7f0) does not know\n13.0, 8.8" (
        lib.head fleetUnknown.failed
      )
      && !lib.elem "cuda-sm-130" fleetUnknown.system-features
      && !lib.elem "cuda-sm-88" fleetUnknown.system-features
      && lib.elem "cuda-sm-75" fleetUnknown.system-features
    ) "13.0 and 8.8 named, never guessed, got ${builtins.toJSON fleetUnknown.failed}")
    (check "fleet-user-features"
      (
        lib.length fleetUserFeatures.failed == 1
        && lib.hasInfix "cuda-sm-35, cuda-sm-37" (lib.head fleetUserFeatures.failed)
        && lib.hasInfix "cuda-sm-75,\nso the daemon would refuse" (lib.head fleetUserFeatures.failed)
      )
      "the user's own system-features: the assertion names the dropped cuda-sm-* features, got ${builtins.toJSON fleetUserFeatures.failed}"
    )
    (checkEqual "fleet-nixpkgs" "pkgs._cuda.lib.getCudaSystemFeatures's answer" (lib.subtractLists (
      nixDefaults ++ cudaFeatures
    ) fleetNixpkgs.system-features) [ "from-nixpkgs-8.9" ])
    (check "fleet-nixpkgs" (
      lib.length fleetNixpkgsUnknown.failed == 1
      && lib.hasInfix "pkgs._cuda.lib.getCudaSystemFeatures does not know\n12.1" (
        lib.head fleetNixpkgsUnknown.failed
      )
    ) "Nixpkgs' db decides what is known, got ${builtins.toJSON fleetNixpkgsUnknown.failed}")
    (checkEqual "fleet-old-nixpkgs" "a _cuda.lib without the function: the project's table" (
      lib.subtractLists
      (nixDefaults ++ cudaFeatures)
      fleetOldNixpkgs.system-features
    ) smTo89)
    (checkEqual "fleet-disabled" "nothing when the module is off" fleetDisabled.system-features
      nixDefaults
    )
    (checkEqual "inventory" "the unit's command" (inventoryUnit.serviceConfig.ExecStart or null
    ) "${package}/bin/cuda-sandbox-check inventory --output /run/cuda-sandbox/inventory.json")
    (checkEqual "inventory" "a oneshot retried while the driver is not up"
      (lib.getAttrs [ "Type" "Restart" ] inventoryUnit.serviceConfig)
      {
        Type = "oneshot";
        Restart = "on-failure";
      }
    )
    (check "inventory"
      (lib.hasInfix ''KERNEL=="nvidia", TAG+="systemd", ENV{SYSTEMD_WANTS}+="cuda-sandbox-inventory.service"'' (system enabled)
      .udevRules)
      "the unit runs again when the nvidia module is loaded"
    )
    (checkEqual "inventory: jetson" "tegra_capability" (jetson.settings.tegra_capability or null) "8.7")
    (check "inventory: jetson" (
      !(jetson.services ? cuda-sandbox-inventory)
    ) "no inventory unit on a Jetson")
    (check "inventory: jetson" (fails jetsonFeatureSet.toml)
      "a feature set (8.7a) is not a Jetson's capability"
    )
    (check "inventory: off" (
      !((system { }).services ? cuda-sandbox-inventory)
    ) "no unit when the module is off")

    # the negative controls
    (checkEqual "control: plain definition" "system-features" plainDefinition.system-features
      cudaFeatures
    )
    (checkEqual "control: mkOptionDefault" "system-features" optionDefault.system-features nixDefaults)
  ];
  # Every row of the table through the module's fallback, for nix-tests/run to hold against
  # `cuda-sandbox-check features --capability` (one table, read the same by Nix and Rust).
  own = import ../nixos-module/cuda-features.nix { inherit lib; };
in
assert lib.all lib.id checks;
{
  passed = lib.length checks;
  fleet = {
    inherit (own) nixpkgs;
    rows = map (row: {
      inherit (row) capability;
      known = own.knows row.capability;
      features = lib.optionals (own.knows row.capability) (own.getCudaSystemFeatures [ row.capability ]);
    }) own.rows;
  };
  refused = {
    empty-pattern = {
      inherit (emptyPattern) toml;
      says = "rule 'ipfs' exposes nothing";
    };
    zluda-leased = {
      inherit (zludaLeased) toml;
      says = "rule 'amd' exposes AMD GPUs (/dev/kfd), which GPU leases";
    };
    empty-settings-rule = {
      inherit (emptySettingsRule) toml;
      says = "rule 'rdma' exposes nothing";
    };
  };
  hosts = lib.optionalAttrs (fakeRoot != null) (
    lib.mapAttrs (_: host: {
      inherit (host) features sees;
      absent = host.absent or [ ];
      runCdi = host.runCdi or null;
      inherit (system host.config) toml failed;
    }) fakeHosts
  );
  configs = {
    nixos-cuda-builder = nixosCudaBuilder.toml;
    zluda = zluda.toml;
    zluda-extended = zludaExtended.toml;
    both-vendors = bothVendors.toml;
    preset-paths = presetPaths.toml;
    default = defaults.toml;
    compat = withCompat.toml;
    devices = withDevices.toml;
    dedicated = dedicated.toml;
    required-mounts = requiredMounts.toml;
    required-mounts-extended = requiredMountsExtended.toml;
    compat-by-default = compatByDefault.toml;
    cdi-toolkit = toolkitOn.toml;
    cdi-per-gpu = cdiPerGpu.toml;
    jetson = jetson.toml;
  };
}
