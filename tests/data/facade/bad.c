/* fixture for the check_device_facade_catches test: a caller reaching the vtable */
const char *device_label(gr_device *d) { return d->iface->name(d->ctx); }
