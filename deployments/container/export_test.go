package container

// BridgeID is the id in the names of an instance's bridges and egress chains.
func BridgeID(instance string) string { return bridgeID(instance) }
