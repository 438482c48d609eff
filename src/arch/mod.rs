//! MMU drivers: the only place that knows a translation structure's format.
//!
//! A driver implements the translation API of [`crate::tapi`]: its translation database (the OS
//! side) and a hardware walk producing a walk plan (the MMU side), plus whichever opt-in
//! capabilities it has. Each driver's file also registers it ([`Registered`]): its config section
//! `arch.<name>` and the designs that run on it, each a driver plus the parameters and OS
//! policies that make it that design. The simulator is generic over the driver: the design is
//! chosen once per run and the access loop is monomorphised for it.
//!
//! Adding a driver: one file under `arch/` with its `impl Driver` and `impl Registered`, and one
//! line in [`registry!`]. Adding a design on an existing driver: one entry in that driver's
//! `DESIGNS`. Nothing in `os/`, `mmu/`, `mem/` or `sim/` changes; if it has to, the interface is
//! missing something every driver should have (docs/architecture.md).

pub mod arm64;
pub mod dipta;
pub mod ecpt;
pub mod fpt;
pub mod nested;
pub mod pomtlb;
pub mod radix;
pub mod rmm;
pub mod sparta;
pub mod utopia;
pub mod x86pte;

use crate::error::{Error, Result};
use crate::tapi::Driver;

/// Every driver, as `section => type`, in the order `xlate designs` lists their designs. The
/// section name is the driver's registry name and its config section (`arch.<section>`).
/// Expands to `$callback! { ... }` so the config struct and the monomorphised dispatch in
/// `sim` are generated from this one list.
macro_rules! registry {
    ($callback:ident) => {
        $callback! {
            radix => $crate::arch::radix::Radix,
            fpt => $crate::arch::fpt::Fpt,
            ecpt => $crate::arch::ecpt::Ecpt,
            pomtlb => $crate::arch::pomtlb::PomTlb,
            rmm => $crate::arch::rmm::Rmm,
            utopia => $crate::arch::utopia::Utopia,
            arm64 => $crate::arch::arm64::Arm64,
            sparta => $crate::arch::sparta::Sparta,
            dipta => $crate::arch::dipta::Dipta,
        }
    };
}
pub(crate) use registry;

/// A named design: a driver plus what makes it that design.
pub struct Design {
    /// Name on the command line.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Registry name of the driver it runs on (see [`registry!`]).
    pub driver: &'static str,
    /// The driver's parameters for this design, applied to the `arch` sections over the
    /// machine's (preset's) configuration.
    pub arch: fn(&mut ArchConfig),
    /// The OS policies and MMU settings the design runs with, by key, as `--set key=value`
    /// (`os.thp=always`, `os.eager_paging=true`, `mmu.perfect_tlb=true`). A config file or
    /// `--set` may override them.
    pub settings: &'static [&'static str],
    /// For a nested design (`guest@host`, [`nested::nest`]): the two designs; `None` natively.
    pub nested: Option<nested::Nesting>,
}

/// Leaves the `arch` sections as the machine configures them.
pub fn no_arch_change(_: &mut ArchConfig) {}

/// What a driver's file declares to register it.
pub trait Registered: Driver {
    /// Type of its `arch.<name>` section.
    type Section: Clone + std::fmt::Debug + Default + PartialEq + serde::Serialize + serde::de::DeserializeOwned;
    /// The designs that run on it, in `xlate designs` order.
    const DESIGNS: &'static [Design];
    /// Checks the section; errors name `key` (`arch.<name>`) and the field.
    fn validate(section: &Self::Section, key: &str) -> Result<()>;
    /// The driver's [`Driver::Config`]: its own section, plus the sections of the drivers it is
    /// built on (Utopia's FlexSeg is `arch.radix`).
    fn config(arch: &ArchConfig) -> Self::Config;
}

macro_rules! arch_config {
    ($($name:ident => $ty:ty,)*) => {
        /// Per-driver configuration sections (`arch.<driver>`), one per registered driver.
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct ArchConfig {
            $(
                #[doc = concat!("`arch.", stringify!($name), "`: [`", stringify!($ty), "`]'s section.")]
                pub $name: <$ty as Registered>::Section,
            )*
        }

        impl ArchConfig {
            /// Validates every section.
            pub fn validate(&self) -> Result<()> {
                $( <$ty as Registered>::validate(&self.$name, concat!("arch.", stringify!($name)))?; )*
                Ok(())
            }
        }

        /// Registry names of the drivers, in registry order.
        pub const DRIVERS: &[&str] = &[$(stringify!($name)),*];

        /// Every design of every driver, in `xlate designs` order.
        pub fn designs() -> impl Iterator<Item = &'static Design> {
            [$(<$ty as Registered>::DESIGNS),*].into_iter().flatten()
        }
    };
}
registry!(arch_config);

/// Finds a design by name; `guest@host` names a nested design of two nestable ones.
pub fn lookup(name: &str) -> Result<&'static Design> {
    if let Some((g, h)) = name.split_once('@') {
        return nested::nest(lookup(g)?, lookup(h)?);
    }
    designs().find(|d| d.name == name).ok_or_else(|| Error::Unknown {
        what: "design",
        name: name.to_string(),
        known: designs().map(|d| d.name.to_string()).chain(["GUEST@HOST".to_string()]).collect(),
    })
}

/// The nestable drivers, as `name => type`: the pairs the simulator monomorphises a nested run
/// for (see [`nested::NESTABLE`]).
macro_rules! nestable {
    ($callback:ident) => {
        $callback! {
            radix => $crate::arch::radix::Radix,
            fpt => $crate::arch::fpt::Fpt,
            ecpt => $crate::arch::ecpt::Ecpt,
            arm64 => $crate::arch::arm64::Arm64,
        }
    };
}
pub(crate) use nestable;

/// The guest kinds, as `driver name => nested::Guest type`: every nestable driver composed with the
/// host's walk, and the drivers that nest their own way (see [`nested::GUEST_ONLY`]).
macro_rules! guests {
    ($callback:ident) => {
        $callback! {
            radix => $crate::arch::nested::Composed<$crate::arch::radix::Radix>,
            fpt => $crate::arch::nested::Composed<$crate::arch::fpt::Fpt>,
            ecpt => $crate::arch::nested::Composed<$crate::arch::ecpt::Ecpt>,
            arm64 => $crate::arch::nested::Composed<$crate::arch::arm64::Arm64>,
            pomtlb => $crate::arch::pomtlb::PomTlbGuest,
        }
    };
}
pub(crate) use guests;

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatch lists agree with the names `guest@host` is checked against.
    #[test]
    fn guest_and_host_lists_agree_with_the_nestable_names() {
        macro_rules! names {
            ($($name:ident => $ty:ty,)*) => { vec![$(stringify!($name)),*] };
        }
        let hosts: Vec<&str> = nestable!(names);
        let guests: Vec<&str> = guests!(names);
        assert_eq!(hosts, nested::NESTABLE);
        assert_eq!(guests, nested::NESTABLE.iter().chain(nested::GUEST_ONLY).copied().collect::<Vec<_>>());
    }

    #[test]
    fn every_design_is_registered_once_under_its_driver() {
        let mut seen = std::collections::BTreeSet::new();
        for d in designs() {
            assert!(DRIVERS.contains(&d.driver), "{}: unknown driver {}", d.name, d.driver);
            assert!(seen.insert(d.name), "design {} declared twice", d.name);
        }
        macro_rules! owners {
            ($($name:ident => $ty:ty,)*) => {
                $( for d in <$ty as Registered>::DESIGNS {
                    assert_eq!(d.driver, stringify!($name), "{} is declared in {}'s file", d.name, stringify!($name));
                } )*
            };
        }
        registry!(owners);
    }
}
