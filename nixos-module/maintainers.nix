# Who answers for the module and the package: the shape of an entry of Nixpkgs'
# maintainers/maintainer-list.nix, for `meta.maintainers`. The project is not (yet) in Nixpkgs,
# so this entry is ours; it has no `githubId` because none could be checked from here.
{
  cuda-sandbox = {
    name = "cuda-sandbox maintainers";
    github = "cuda-sandbox";
  };
}
