pub mod calibration;
