"""transformWithState: state variables, their metadata and the one physical store they share."""
