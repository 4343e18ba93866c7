package codehost

import "github.com/keelson-dev/keelson/codehost/internal/store"

// The states of stored installations and deliveries, the decisions recorded
// for a project matched by a push, and the sources of a delivery (see
// codehost/internal/store for each).
const (
	InstallationActive    = store.InstallationActive
	InstallationSuspended = store.InstallationSuspended
	InstallationDeleted   = store.InstallationDeleted

	DeliveryPending   = store.DeliveryPending
	DeliveryProcessed = store.DeliveryProcessed
	DeliveryFailed    = store.DeliveryFailed

	DecisionDeployed        = store.DecisionDeployed
	DecisionBranchMismatch  = store.DecisionBranchMismatch
	DecisionAutoDeployOff   = store.DecisionAutoDeployOff
	DecisionSkipMessage     = store.DecisionSkipMessage
	DecisionBranchDeleted   = store.DecisionBranchDeleted
	DecisionNotLinked       = store.DecisionNotLinked
	DecisionNoAccess        = store.DecisionNoAccess
	DecisionQuotaExceeded   = store.DecisionQuotaExceeded
	DecisionFailed          = store.DecisionFailed
	DecisionAlreadyDeployed = store.DecisionAlreadyDeployed

	SourceApp    = store.SourceApp
	SourceGitHub = store.SourceGitHub
	SourceGitea  = store.SourceGitea
	SourceGitLab = store.SourceGitLab
)
