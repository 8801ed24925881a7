// @grafana/assistant is an optional peer of @grafana/flamegraph (its AI button, drawn only when
// the data frame carries an assistantContext, which the page never sets); it is not installed
// (it wants React 19), so the bundle resolves it here.
export const OpenAssistantButton = () => null;
