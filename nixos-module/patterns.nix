# programs.nix-required-mounts' patterns as the hook's rule entries, shared by ./required-mounts.nix
# (each pattern its own rule) and ./default.nix (with the preset, `allowedPatterns.nvidia-gpu`
# extends the rule `nvidia`). Not a module: `import ./patterns.nix { inherit lib; }`.
{ lib }:
let
  isGlob = s: builtins.match ".*[][*?].*" s != null;
  # A `{ host; guest; }` entry, as against a path or a package (which is string-like).
  isMount = entry: builtins.isAttrs entry && !(lib.isStringLike entry);

  ruleOf =
    name: pattern:
    let
      strings = map toString (lib.filter (e: !(isMount e)) pattern.paths);
      mounts = lib.filter isMount pattern.paths;
      globs = lib.filter isGlob strings;
      literals = lib.filter (s: !(isGlob s)) strings;
      follow = lib.optionalAttrs pattern.unsafeFollowSymlinks { follow_entry_symlinks = true; };
    in
    {
      inherit name;
      features = pattern.onFeatures;
    }
    // lib.optionalAttrs (globs != [ ]) {
      device = map (glob: {
        inherit glob;
        required = true;
      }) globs;
    }
    // lib.optionalAttrs (literals != [ ]) {
      path = map (
        path:
        {
          inherit path;
          required = true;
        }
        // follow
      ) literals;
    }
    // lib.optionalAttrs (mounts != [ ]) {
      mount = map (
        m:
        {
          inside = m.guest;
          outside = m.host;
          required = true;
        }
        // follow
      ) mounts;
    };
in
{
  inherit isGlob;

  # The host path an entry names, for messages.
  entryName = entry: if isMount entry then entry.host else toString entry;

  # One pattern as a rule of the hook's configuration, named `name`: its onFeatures are the
  # rule's features; a path or package becomes a [[rule.path]], a glob (of device nodes under
  # /dev) a [[rule.device]], `{ host; guest; }` a [[rule.mount]], each required (as
  # nix-required-mounts fails the build when one is missing); unsafeFollowSymlinks becomes
  # follow_entry_symlinks on its paths and mounts. Keys with no entry are left out. The
  # pattern's unsafeFollowSymlinks is read even with nothing to follow, as nix-required-mounts
  # serialises every option: a conflicting definition is an error whatever the paths.
  translate = name: pattern: builtins.seq pattern.unsafeFollowSymlinks (ruleOf name pattern);
}
