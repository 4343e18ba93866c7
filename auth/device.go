package auth

// DeviceCookie is the cookie that carries a device token to browsers
// (HttpOnly, Path /auth); other clients keep the login's deviceToken and
// send it back in the login body. The tokens: auth/internal/device.
const DeviceCookie = "keelson_device"
