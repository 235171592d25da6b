// Placeholder: the SQS adapter lands with issue 4.
export {};
