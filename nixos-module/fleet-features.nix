# programs.cuda-sandbox.cudaCapabilities: the `cuda-sm-*` system features of this builder's
# GPUs, in Nixpkgs' convention (`_cuda.lib.getCudaSystemFeatures`), added to Nix's system
# features so that clients and Hydra can schedule a build by the GPU it needs. With a Nixpkgs
# that has the function, its answer; otherwise the project's table (./cuda-features.nix, the
# rows `cuda-sandbox-check features` reads). The features are advertised only: they select no
# rule of the hook (the rule `nvidia` gives the GPU to `cuda` builds).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.programs.cuda-sandbox;
  own = import ./cuda-features.nix { inherit lib; };

  # Nixpkgs' own, where the Nixpkgs in use has it (NixOS/nixpkgs before the convention has a
  # `_cuda.lib` without it).
  nixpkgsCuda = pkgs._cuda or { };
  fromNixpkgs = nixpkgsCuda ? lib.getCudaSystemFeatures && nixpkgsCuda ? db.cudaCapabilityToInfo;
  source =
    if fromNixpkgs then
      {
        name = "pkgs._cuda.lib.getCudaSystemFeatures";
        knows = gpu: nixpkgsCuda.db.cudaCapabilityToInfo ? ${gpu};
        inherit (nixpkgsCuda.lib) getCudaSystemFeatures;
      }
    else
      {
        name = "cuda-sandbox's capability table (following ${own.nixpkgs.repository} ${own.nixpkgs.commit})";
        inherit (own) knows getCudaSystemFeatures;
      };

  isGpu = capability: builtins.match "[0-9]+\\.[0-9]" capability != null;
  featureSets = lib.filter (c: builtins.match "[0-9]+\\.[0-9][a-z]+" c != null) cfg.cudaCapabilities;
  malformed = lib.filter (c: !isGpu c && !lib.elem c featureSets) cfg.cudaCapabilities;
  unknown = lib.filter (c: isGpu c && !source.knows c) cfg.cudaCapabilities;
  gpus = lib.filter (c: isGpu c && source.knows c) cfg.cudaCapabilities;
in
{
  options.programs.cuda-sandbox = {
    cudaCapabilities = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      example = [
        "8.9"
        "9.0"
      ];
      description = ''
        The compute capabilities of this builder's GPUs (`cuda-sandbox-check features --json`
        lists them; a MIG instance has its GPU's). Their `cuda-sm-*` features, in Nixpkgs'
        convention (`_cuda.lib.getCudaSystemFeatures`: every baseline capability at or below
        a GPU's, its own arch-specific `a` one, the family-specific `f` ones of its major at
        or below it; the union over the GPUs), are added to
        {option}`nix.settings.system-features` at the module's priority, keeping Nix's
        defaults, as {option}`programs.cuda-sandbox.features` are; a definition of yours adds
        to the list. They come from `pkgs._cuda.lib.getCudaSystemFeatures` where the Nixpkgs
        in use has it, else from cuda-sandbox's own table. A capability that table does not
        know, or a feature set such as `9.0a` (code, not a GPU), fails an assertion.
        The features only advertise: they decide which builds Nix sends here, not what the
        hook gives a build.
      '';
    };

    cudaSystemFeatures = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      readOnly = true;
      default = lib.unique (lib.optionals (gpus != [ ]) (source.getCudaSystemFeatures gpus));
      defaultText = lib.literalExpression "pkgs._cuda.lib.getCudaSystemFeatures programs.cuda-sandbox.cudaCapabilities";
      description = ''
        The `cuda-sm-*` features of {option}`programs.cuda-sandbox.cudaCapabilities`, as added
        to Nix's system features: what a client's {option}`nix.buildMachines` entry or a Hydra
        machines file lists for this builder, beside `cuda`.
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    # mkDefault, as the module's other features: joined with Nix's defaults (see default.nix).
    nix.settings.system-features = lib.mkDefault cfg.cudaSystemFeatures;

    assertions = [
      {
        assertion = featureSets == [ ];
        message = ''
          programs.cuda-sandbox.cudaCapabilities: ${lib.concatStringsSep ", " featureSets} is a
          feature set rather than a GPU (it names code built for a GPU): give the GPU's
          capability, ${
            lib.concatMapStringsSep ", " (c: lib.head (builtins.match "([0-9]+\\.[0-9]).*" c)) featureSets
          }.
        '';
      }
      {
        assertion = malformed == [ ];
        message = ''
          programs.cuda-sandbox.cudaCapabilities: ${lib.concatStringsSep ", " malformed} is not a
          compute capability: write it as the driver reports it, X.Y (8.9).
        '';
      }
      {
        assertion = unknown == [ ];
        message = ''
          programs.cuda-sandbox.cudaCapabilities: ${source.name} does not know
          ${lib.concatStringsSep ", " unknown}, so it advertises no feature for it (never a
          guessed one). A newer Nixpkgs or cuda-sandbox may know it.
        '';
      }
    ];
  };
}
