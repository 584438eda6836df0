// Package nomad holds what the Go tools need to speak as Nomad or as a Nomad plugin.
package nomad

import plugin "github.com/hashicorp/go-plugin"

// Handshake is Nomad's go-plugin handshake (plugins/base.Handshake).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// APIVersion is Nomad's plugin API version for drivers (drivers.ApiVersion010).
const APIVersion = "v0.1.0"
