// The generated client names the DOM library's BodyInit, which Node.js's own fetch types lack.
type BodyInit = NonNullable<RequestInit['body']>;
