//! The CDI spec's schema, as far as the hook reads it (CDI spec, `SPEC.md` and
//! `specs-go/config.go`): the spec's kind, its devices, and the container edits of each device
//! and of the whole spec. Fields the hook cannot carry out are read too, so that `explain` can
//! list them; keys it does not know are kept by name for the same reason.
//!
//! A spec file is JSON (`.json`) or YAML (`.yaml`, `.yml`), as the reference implementation
//! reads them. YAML is read through `serde_norway` (which bounds nesting) once it has passed
//! [`super::yaml::check`]: no anchor or alias, which would replay nodes, and a cap on its
//! events.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// One spec file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Spec {
    /// The spec format's version (`0.5.0`, `0.8.0`, …).
    pub cdi_version: String,
    /// The kind of device, `vendor.com/class`.
    pub kind: String,
    /// The devices it defines.
    pub devices: Vec<Device>,
    /// Edits that come with every device of the spec.
    #[serde(default, deserialize_with = "nullable")]
    pub container_edits: ContainerEdits,
}

/// A device a spec defines.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Device {
    /// Its name within the spec's kind (`all`, `0`, `0:1`, `GPU-…`).
    pub name: String,
    /// Its edits.
    #[serde(default, deserialize_with = "nullable")]
    pub container_edits: ContainerEdits,
}

/// What a device (or a spec) changes in a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContainerEdits {
    /// Environment variables, `NAME=value`.
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default, deserialize_with = "nullable")]
    pub device_nodes: Vec<DeviceNode>,
    /// OCI hooks to run.
    #[serde(default, deserialize_with = "nullable")]
    pub hooks: Vec<Hook>,
    /// Bind mounts.
    #[serde(default, deserialize_with = "nullable")]
    pub mounts: Vec<Mount>,
    /// Supplementary groups for the container's process.
    #[serde(default, deserialize_with = "nullable")]
    pub additional_gids: Vec<u32>,
    /// Any other edit (`intelRdt`, `netDevices`, …), by key.
    #[serde(flatten)]
    pub other: BTreeMap<String, Ignored>,
}

impl ContainerEdits {
    /// Appends `more`'s edits to these (a key of `other` once), as a device's edits are
    /// followed by its spec's.
    pub(crate) fn extend(&mut self, more: &ContainerEdits) {
        self.env.extend(more.env.iter().cloned());
        self.device_nodes.extend(more.device_nodes.iter().cloned());
        self.hooks.extend(more.hooks.iter().cloned());
        self.mounts.extend(more.mounts.iter().cloned());
        self.additional_gids
            .extend(more.additional_gids.iter().copied());
        for (k, v) in &more.other {
            self.other.entry(k.clone()).or_insert(*v);
        }
    }
}

/// A value the hook does not read, skipped unbuilt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ignored;

impl<'de> Deserialize<'de> for Ignored {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Ignored)
    }
}

/// A device node to create in the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceNode {
    /// Where the container sees it.
    pub path: String,
    /// The host's node, when it is not at `path`.
    pub host_path: Option<String>,
    /// `c`, `b`, `u` or `p`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Major number.
    pub major: Option<i64>,
    /// Minor number.
    pub minor: Option<i64>,
    /// File mode of the node to create.
    pub file_mode: Option<u32>,
    /// Cgroup permissions (`rwm`).
    pub permissions: Option<String>,
    /// Owner of the node to create.
    pub uid: Option<u32>,
    /// Group of the node to create.
    pub gid: Option<u32>,
}

/// A bind mount.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Mount {
    /// The host path.
    pub host_path: String,
    /// Where the container sees it.
    pub container_path: String,
    /// Mount options (`ro`, `nosuid`, `bind`, …).
    #[serde(default, deserialize_with = "nullable")]
    pub options: Vec<String>,
    /// Filesystem type.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// An OCI hook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Hook {
    /// When it runs (`createContainer`, `startContainer`, …).
    pub hook_name: String,
    /// The program.
    pub path: String,
    /// Its arguments, the program's name first.
    #[serde(default, deserialize_with = "nullable")]
    pub args: Vec<String>,
    /// Its environment.
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<String>,
    /// Its time limit in seconds.
    pub timeout: Option<i64>,
}

/// The format of a spec file, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `.json`.
    Json,
    /// `.yaml` or `.yml`.
    Yaml,
}

impl Format {
    /// The format of a file named `name`; `None` for a file that is no spec.
    pub(crate) fn of(name: &str) -> Option<Format> {
        match name.rsplit_once('.')?.1 {
            "json" => Some(Format::Json),
            "yaml" | "yml" => Some(Format::Yaml),
            _ => None,
        }
    }
}

/// Why a spec's text is no spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParseError {
    /// Not valid JSON or YAML, or not a spec (the parser's message, on one line).
    #[error("not a CDI spec: {0}")]
    NotASpec(String),
    /// A YAML spec with an anchor or alias, or more events than any spec has.
    #[error("{0}")]
    YamlRefused(#[from] super::yaml::YamlError),
    /// A device name appears twice.
    #[error("device {0:?} is defined twice")]
    Duplicate(String),
}

impl Spec {
    /// Parses `text` in `format`, in time linear in the text: YAML only once
    /// [`super::yaml::check`] found no anchor or alias and at most
    /// [`super::yaml::MAX_EVENTS`] events, so nothing is replayed.
    pub(crate) fn parse(text: &str, format: Format) -> Result<Spec, ParseError> {
        let spec: Spec = match format {
            Format::Json => serde_json::from_str(text).map_err(not_a_spec)?,
            Format::Yaml => {
                super::yaml::check(text)?;
                serde_norway::from_str(text).map_err(not_a_spec)?
            }
        };
        let mut names = std::collections::BTreeSet::new();
        if let Some(d) = spec.devices.iter().find(|d| !names.insert(d.name.as_str())) {
            return Err(ParseError::Duplicate(d.name.clone()));
        }
        Ok(spec)
    }

    /// The device named `name`.
    pub(crate) fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }
}

/// A list that may be written as `null` (Go's encoder writes a nil slice so).
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A parser's error, its message on one line.
fn not_a_spec(error: impl std::fmt::Display) -> ParseError {
    let text = error.to_string();
    ParseError::NotASpec(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: \"0\"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15
    options: [ro, nosuid, nodev, bind]
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  intelRdt: {closID: x}
";

    #[test]
    fn yaml_and_json_give_the_same_spec() {
        let yaml = Spec::parse(YAML, Format::Yaml).unwrap();
        let json = Spec::parse(
            &serde_json::to_string(&serde_norway::from_str::<serde_json::Value>(YAML).unwrap())
                .unwrap(),
            Format::Json,
        )
        .unwrap();
        assert_eq!(yaml, json);
        assert_eq!(
            yaml.device("0").unwrap().container_edits.device_nodes[0].path,
            "/dev/nvidia0"
        );
        assert_eq!(yaml.container_edits.mounts[0].options.len(), 4);
        assert!(yaml.container_edits.other.contains_key("intelRdt"));
    }

    #[test]
    fn nulls_are_empty_lists() {
        let s = Spec::parse(
            r#"{"cdiVersion":"0.3.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"env":null,"mounts":null}}],"containerEdits":null}"#,
            Format::Json,
        )
        .unwrap();
        assert!(s.devices[0].container_edits.env.is_empty());
    }

    #[test]
    fn broken_specs_are_one_line_errors() {
        for (text, format) in [
            ("", Format::Json),
            ("{}", Format::Json),
            ("{}", Format::Yaml),
            ("kind: [\n", Format::Yaml),
            (
                "{\"cdiVersion\":\"0.3.0\",\"kind\":\"a.com/b\",\"devices\":[{\"name\":\"x\"},{\"name\":\"x\"}]}",
                Format::Json,
            ),
        ] {
            let e = Spec::parse(text, format).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn yaml_alias_bombs_are_refused_quickly() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..40 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        text.push_str("cdiVersion: 0.5.0\nkind: a.com/b\ndevices: []\n");
        text.push_str("containerEdits: {intelRdt: *a39}\n");
        let start = std::time::Instant::now();
        let e = Spec::parse(&text, Format::Yaml).unwrap_err();
        assert!(
            matches!(
                e,
                ParseError::YamlRefused(super::super::yaml::YamlError::Anchor(_, 1, _))
            ),
            "{e:?}"
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }
}
