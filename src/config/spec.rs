//! How a file's tables are read: a spec is a table of optional settings, unknown
//! fields refused, and only a table (never a list standing for one).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// Reads a `T` only from a table.
pub(crate) fn table<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct V<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of settings")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(V(PhantomData))
}

/// Defines a spec: a table of optional settings, each written only when set,
/// read only from a table with unknown fields refused, with `merged_over` (this
/// spec's settings, else `base`'s: a route's over the default's).
macro_rules! spec {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
        pub(crate) struct $name {
            $(
                $(#[$fm])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub(crate) $field: Option<$ty>,
            )*
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Default, serde::Deserialize)]
                #[serde(default, deny_unknown_fields)]
                struct Fields {
                    $($field: Option<$ty>,)*
                }
                let f: Fields = $crate::config::spec::table(d)?;
                Ok($name { $($field: f.$field,)* })
            }
        }

        impl $name {
            /// This spec's settings, else `base`'s.
            #[allow(dead_code)]
            pub(crate) fn merged_over(self, base: &Self) -> Self {
                $name { $($field: self.$field.or_else(|| base.$field.clone()),)* }
            }
        }
    };
}

/// Writes `Serialize` and `Deserialize` for a policy through its spec:
/// `Spec::of(&policy)` and `spec.build()`.
macro_rules! through_spec {
    ($policy:ty, $spec:ident) => {
        impl serde::Serialize for $policy {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let spec = $spec::of(self).map_err(serde::ser::Error::custom)?;
                serde::Serialize::serialize(&spec, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $policy {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let spec = <$spec as serde::Deserialize>::deserialize(d)?;
                spec.build().map_err(serde::de::Error::custom)
            }
        }
    };
}
