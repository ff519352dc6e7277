# A small TOML writer for the evaluation tests, standing in for `pkgs.formats.toml`'s
# `generate` (which runs remarshal's json2toml and needs a build). It covers what the hook's
# configuration uses: tables, arrays of tables, strings, booleans, integers and arrays of
# those. Its output is validated by the real hook (`cuda-sandbox-hook check-config`), so a bug
# here shows up as a failed test rather than a false pass.
{ lib }:
let
  inherit (builtins)
    attrNames
    concatStringsSep
    filter
    isAttrs
    isBool
    isFloat
    isInt
    isList
    isString
    match
    replaceStrings
    ;

  # Nix string literals have no \x escapes; JSON's \u escapes give the raw characters.
  controlCharacters = builtins.fromJSON ''"[\u0001-\u0008\u000b\u000c\u000e-\u001f\u007f]"'';

  key = k: if match "[A-Za-z0-9_-]+" k != null then k else string k;

  string =
    s:
    assert lib.assertMsg (
      match ".*${controlCharacters}.*" s == null
    ) "toml.nix: control character in ${s}";
    ''"${replaceStrings [ "\\" "\"" "\n" "\r" "\t" ] [ "\\\\" "\\\"" "\\n" "\\r" "\\t" ] s}"'';

  scalar =
    v:
    if isString v then
      string v
    else if isBool v then
      lib.boolToString v
    else if isInt v then
      toString v
    else if isFloat v then
      toString v
    else if isList v then
      "[${concatStringsSep ", " (map scalar v)}]"
    else
      throw "toml.nix: cannot write ${lib.generators.toPretty { } v} as a TOML value";

  isTableArray = v: isList v && v != [ ] && lib.all isAttrs v;

  # One table's body: its plain keys first (they belong to the header above them), then its
  # sub-tables, then its arrays of tables, each of which recurses with the longer header.
  table =
    path: attrs:
    let
      names = attrNames attrs;
      plain = filter (n: !(isAttrs attrs.${n}) && !(isTableArray attrs.${n})) names;
      tables = filter (n: isAttrs attrs.${n}) names;
      arrays = filter (n: isTableArray attrs.${n}) names;
      header = n: concatStringsSep "." (map key (path ++ [ n ]));
    in
    concatStringsSep "" (
      map (n: "${key n} = ${scalar attrs.${n}}\n") plain
      ++ map (n: "\n[${header n}]\n" + table (path ++ [ n ]) attrs.${n}) tables
      ++ lib.concatMap (
        n: map (element: "\n[[${header n}]]\n" + table (path ++ [ n ]) element) attrs.${n}
      ) arrays
    );
in
value:
assert lib.assertMsg (isAttrs value) "toml.nix: a TOML document is a table";
lib.removePrefix "\n" (table [ ] value)
