# The fleet's `cuda-sm-*` system features, computed in Nix from the project's own capability
# table (../cuda-facts/src/gpus.txt, the one the runner's `cuda-sandbox-check features`
# reads), for a Nixpkgs whose `_cuda.lib` has no `getCudaSystemFeatures` yet. Written here from
# the convention's rules, no Nixpkgs code: for each GPU of capability X.Y, over the forms the
# table's `nixpkgs` column lists (what Nixpkgs' `_cuda.db` holds at the commit of its
# `nixpkgs:` line), every baseline X'.Y' at or below X.Y, an arch-specific X.Ya of X.Y itself,
# and a family-specific X.Zf with the same major X and Z at or below Y; several GPUs give the
# union. A feature is `cuda-sm-` and the capability without its dot (`cuda-sm-90a`).
{ lib }:
let
  lines = lib.splitString "\n" (builtins.readFile ../cuda-facts/src/gpus.txt);

  # Rows are `X.Y | name | jetson | first | a | f | until | nixpkgs | source`.
  rows = map (
    line:
    let
      fields = lib.splitString " | " line;
    in
    {
      capability = lib.elemAt fields 0;
      nixpkgs = lib.elemAt fields 7;
    }
  ) (lib.filter (line: builtins.match "[0-9]+\\.[0-9] \\| .*" line != null) lines);

  pinWords = lib.splitString " " (
    lib.removePrefix "nixpkgs: " (lib.findFirst (lib.hasPrefix "nixpkgs: ") "nixpkgs: ? ?" lines)
  );

  # Every form the convention knows, in the table's order: { base = "9.0"; suffix = "a"; }.
  forms = lib.concatMap (
    row:
    map (word: {
      base = row.capability;
      suffix = if word == "sm" then "" else word;
    }) (lib.optionals (row.nixpkgs != "-") (lib.splitString " " row.nixpkgs))
  ) rows;

  major = capability: lib.head (lib.splitString "." capability);
  mkCudaSystemFeature = capability: "cuda-sm-${lib.replaceStrings [ "." ] [ "" ] capability}";
  atMost = low: high: builtins.compareVersions low high <= 0;
  offers =
    gpu: form:
    if form.suffix == "a" then
      form.base == gpu
    else if form.suffix == "f" then
      major form.base == major gpu && atMost form.base gpu
    else
      atMost form.base gpu;
in
{
  # The Nixpkgs revision the table follows: { repository; commit; }.
  nixpkgs = {
    repository = lib.elemAt pinWords 0;
    commit = lib.elemAt pinWords 1;
  };

  # Every row, as the Rust side reads it (nix-tests compare the two).
  inherit rows;

  # `cuda-sm-90a` for "9.0a".
  inherit mkCudaSystemFeature;

  # Whether the convention knows a GPU of this capability (a baseline form of it).
  knows = gpu: lib.any (form: form.base == gpu && form.suffix == "") forms;

  # The union of the GPUs' features, in the table's order; each GPU must be known.
  getCudaSystemFeatures =
    gpus:
    map (form: mkCudaSystemFeature "${form.base}${form.suffix}") (
      lib.filter (form: lib.any (gpu: offers gpu form) gpus) forms
    );
}
