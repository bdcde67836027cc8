// wrangler's default module rules import .html files as text (the playground page).
declare module '*.html' {
  const text: string;
  export default text;
}
