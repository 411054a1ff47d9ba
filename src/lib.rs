pub mod shim;
