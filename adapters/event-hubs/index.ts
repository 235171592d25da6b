// Placeholder: the Event Hubs adapter lands with issue 6.
export {};
