// Placeholder: the Storage Queue adapter lands with issue 5.
export {};
